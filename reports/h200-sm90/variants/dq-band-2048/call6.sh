#!/usr/bin/env bash
# Session 13, call 6 (H200): the standard tier at REV; then the window cells at left 2048 with the
# dQ on its dense row (the tables as they are: base) and on the window row (widest_band 2048:
# head), base / head / base, no Flex.
set -u
export PYTHONPATH=. FA_HARNESS_REVISION=$REV
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/standard-s13
timeout 300 python -m conformance run --tier standard --out $OUT/standard-s13 > $OUT/standard-s13/run.log 2>&1; echo "standard rc=$? $(date +%T)"
tail -3 $OUT/standard-s13/run.log
(cd $OUT && tar czf standard-s13.tgz standard-s13 && rm -rf standard-s13)
for run in base1 head base2; do
  args=(--variants window --windows 2048 --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/dq2048-$run)
  if [ $run = head ]; then timeout 100 python devrun/dq_band.py 2048 -- "${args[@]}" > $OUT/dq2048-$run.log 2>&1
  else timeout 100 python benchmarks/variants_benchmark.py "${args[@]}" > $OUT/dq2048-$run.log 2>&1; fi
  echo "dq2048 $run rc=$? $(date +%T)"; mv $OUT/dq2048-$run.log $OUT/dq2048-$run/run.log
  sed -n '/^## Sliding/,/^## /p' $OUT/dq2048-$run/benchmark.md | grep "^| [fb]" | cut -d'|' -f2-7,9
done
(cd $OUT && tar czf dq2048.tgz dq2048-base1 dq2048-head dq2048-base2 && rm -rf dq2048-base1 dq2048-head dq2048-base2)
