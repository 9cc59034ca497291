#!/usr/bin/env bash
# Session 12, call 2 (H200): the working tree's ALiBi: the standard tier's ALiBi cases x 16 seeds and the two
# ALiBi mutants; then the windowed backward launch sweeps (causal window (1024, 0), bf16, D 64 / 128).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
python -m conformance list --tier standard | grep alibi > $OUT/alibi-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/alibi-cases.txt
mkdir -p $OUT/alibi-seeds; timeout 120 python -m conformance run --seeds 16 "${args[@]}" --out $OUT/alibi-seeds > $OUT/alibi-seeds/run.log 2>&1; echo "seeds rc=$? $(date +%T)"
tail -1 $OUT/alibi-seeds/run.log
(cd $OUT && tar czf call2-seeds.tgz alibi-seeds alibi-cases.txt gpu.txt && rm -rf alibi-seeds)
mkdir -p $OUT/mutants; timeout 120 python -m mutants --tier standard --mutant alibi_bias_added --mutant alibi_top_left --max-kills 1 -j 2 --out $OUT/mutants > $OUT/mutants/run.log 2>&1; echo "mutants rc=$? $(date +%T)"
tail -4 $OUT/mutants/run.log
(cd $OUT && tar czf call2-mutants.tgz mutants && rm -rf mutants)
mkdir -p $OUT/tune-window
for k in bwd_dkdv bwd_dq; do
  timeout 130 python benchmarks/tune_launch.py --kernel $k --window 1024 --head-dims 64,128 --seq-len 8192 --dtype bf16 \
    --block-m 64,128 --block-n 32,64,128 --warps 4,8 --stages 2,3 --descriptors 1 --out $OUT/tune-window/$k-bf16.jsonl > $OUT/tune-window/$k-bf16.log 2>&1
  echo "tune $k rc=$? $(date +%T)"; grep -B1 -A7 "^bwd" $OUT/tune-window/$k-bf16.log | head -30
done
(cd $OUT && tar czf call2-tune.tgz tune-window && rm -rf tune-window)
