#!/usr/bin/env bash
# Session 12, call 5 (H200): the windowed forward's launch sweep (left 1024, bf16, D 64/128, stages 2/3 and
# descriptors, never swept for windows), then the sweep's best row per head dim injected as fwd.window
# (devrun/window_row.py) against the tables as they are: window cells base1 / head / base2, bf16 and fp16.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/tune-window-fwd
timeout 230 python benchmarks/tune_launch.py --kernel fwd --window 1024 --head-dims 64,128 --seq-len 8192 --dtype bf16 \
  --block-m 64,128 --block-n 64,128 --warps 4,8 --stages 2,3 --descriptors 0,1 --out $OUT/tune-window-fwd/fwd-bf16.jsonl > $OUT/tune-window-fwd/fwd-bf16.log 2>&1
echo "tune rc=$? $(date +%T)"; grep -A6 "^fwd" $OUT/tune-window-fwd/fwd-bf16.log
(cd $OUT && tar czf call5-tune.tgz tune-window-fwd gpu.txt)
for run in base1 head base2; do
  if [ $run = head ]; then cmd="python devrun/window_row.py $OUT/tune-window-fwd/fwd-bf16.jsonl --"; else cmd="python benchmarks/variants_benchmark.py"; fi
  timeout 100 $cmd --variants window --windows 1024,4096 --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/wfwd-$run > $OUT/wfwd-$run.log 2>&1; echo "window $run rc=$? $(date +%T)"
  head -1 $OUT/wfwd-$run.log; mv $OUT/wfwd-$run.log $OUT/wfwd-$run/run.log
  echo "== $run"; sed -n '/^## Sliding/,/^## /p' $OUT/wfwd-$run/benchmark.md | grep "^| [fb]" | cut -d'|' -f2-7,9
done
(cd $OUT && tar czf call5-ab.tgz wfwd-base1 wfwd-head wfwd-base2 && rm -rf wfwd-base1 wfwd-head wfwd-base2 tune-window-fwd)
