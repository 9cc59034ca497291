#!/usr/bin/env bash
# Session 11, call 3: the varlen launch sweeps with tune_launch fixed (every row now launches the
# configuration it names: an override, confirmed by the launch record; before, a packed batch on sm_90
# kept fwd.varlen's table for every row). Forward at D 64/128 in bf16 and fp16; the backward kernels
# at D 64 bf16 (varlen backward 0.88x dense there).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/tune-varlen
for dt in bf16 fp16; do
  timeout 140 python benchmarks/tune_launch.py --kernel fwd --varlen --head-dims 64,128 --seq-len 8192 --dtype $dt \
    --block-m 64,128 --block-n 32,64 --warps 4,8 --stages 2,3 --out $OUT/tune-varlen/fwd-$dt.jsonl > $OUT/tune-varlen/fwd-$dt.log 2>&1
  echo "fwd $dt rc=$? $(date +%T)"; grep -A6 "^fwd" $OUT/tune-varlen/fwd-$dt.log
done
timeout 110 python benchmarks/tune_launch.py --kernel bwd_dkdv --varlen --head-dims 64 --seq-len 8192 --dtype bf16 \
  --block-m 32,64,128 --block-n 32,64 --warps 4,8 --stages 2,3 --descriptors 1 --out $OUT/tune-varlen/bwd_dkdv-bf16.jsonl > $OUT/tune-varlen/bwd_dkdv-bf16.log 2>&1
echo "dkdv rc=$? $(date +%T)"; grep -A6 "^bwd" $OUT/tune-varlen/bwd_dkdv-bf16.log
timeout 110 python benchmarks/tune_launch.py --kernel bwd_dq --varlen --head-dims 64 --seq-len 8192 --dtype bf16 \
  --block-m 64,128 --block-n 32,64 --warps 4,8 --stages 2,3 --descriptors 1 --out $OUT/tune-varlen/bwd_dq-bf16.jsonl > $OUT/tune-varlen/bwd_dq-bf16.log 2>&1
echo "dq rc=$? $(date +%T)"; grep -A6 "^bwd" $OUT/tune-varlen/bwd_dq-bf16.log
(cd $OUT && tar czf call3-tune.tgz tune-varlen gpu.txt && rm -rf tune-varlen)
