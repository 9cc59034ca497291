#!/usr/bin/env bash
# Session 11, call 2: the varlen forward launch sweep (BLOCK_N 32 and 2 stages never timed), then the
# standard tier, the softcap cases x 16 seeds, the ALiBi and softcap mutants, on the working tree.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/tune-varlen
for dt in bf16 fp16; do
  timeout 100 python benchmarks/tune_launch.py --kernel fwd --varlen --head-dims 64,128 --seq-len 8192 --dtype $dt \
    --block-m 64,128 --block-n 32,64 --warps 4,8 --stages 2,3 --out $OUT/tune-varlen/fwd-$dt.jsonl > $OUT/tune-varlen/fwd-$dt.log 2>&1
  echo "tune $dt rc=$? $(date +%T)"; grep -A5 "^fwd" $OUT/tune-varlen/fwd-$dt.log
done
(cd $OUT && tar czf call2-tune.tgz tune-varlen gpu.txt && rm -rf tune-varlen)
mkdir -p $OUT/standard; timeout 200 python -m conformance run --tier standard --out $OUT/standard > $OUT/standard/run.log 2>&1; echo "standard rc=$? $(date +%T)"
tail -1 $OUT/standard/run.log
(cd $OUT && tar czf call2-standard.tgz standard && rm -rf standard)
python -m conformance list --tier standard | grep softcap > $OUT/softcap-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/softcap-cases.txt
mkdir -p $OUT/softcap-seeds; timeout 80 python -m conformance run --seeds 16 "${args[@]}" --out $OUT/softcap-seeds > $OUT/softcap-seeds/run.log 2>&1; echo "seeds rc=$? $(date +%T)"
tail -1 $OUT/softcap-seeds/run.log
(cd $OUT && tar czf call2-seeds.tgz softcap-seeds softcap-cases.txt && rm -rf softcap-seeds)
mkdir -p $OUT/mutants; timeout 150 python -m mutants --tier standard --mutant alibi_bias_added --mutant alibi_top_left --mutant softcap_backward_no_slope --mutant softcap_hardware_tanh --mutant softcap_16bit_tanh --max-kills 1 -j 5 --out $OUT/mutants > $OUT/mutants/run.log 2>&1; echo "mutants rc=$? $(date +%T)"
tail -8 $OUT/mutants/run.log
(cd $OUT && tar czf call2-mutants.tgz mutants && rm -rf mutants)
