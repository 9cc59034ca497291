#!/usr/bin/env bash
# Session 12, call 6 (H200): working tree = 48b7604 + fwd.window rows (64x64 w4 s2 at D 64, s3 at D 128) + the
# narrow-band rule (kernels.problem.launch_variant: window tables for bands of <= 2048 keys); devrun/base = 48b7604.
# The standard tier's window cases x 4 seeds; window cells 1024 / 2048 / 4096 base1 / head / base2 (no Flex).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
python -m conformance list --tier standard | grep "win[0-9]" > $OUT/window-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/window-cases.txt
mkdir -p $OUT/window-seeds; timeout 100 python -m conformance run --seeds 4 "${args[@]}" --out $OUT/window-seeds > $OUT/window-seeds/run.log 2>&1; echo "seeds rc=$? $(date +%T)"
tail -1 $OUT/window-seeds/run.log
(cd $OUT && tar czf call6-seeds.tgz window-seeds window-cases.txt gpu.txt && rm -rf window-seeds)
for run in base1 head base2; do
  if [ $run = head ]; then dir=.; else dir=devrun/base; fi
  (cd $dir && PYTHONPATH=. timeout 100 python benchmarks/variants_benchmark.py --variants window --windows 1024,2048,4096 --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/wrule-$run > $OUT/wrule-$run.log 2>&1); echo "window $run rc=$? $(date +%T)"
  mv $OUT/wrule-$run.log $OUT/wrule-$run/run.log
  echo "== $run"; sed -n '/^## Sliding/,/^## /p' $OUT/wrule-$run/benchmark.md | grep "^| [fb]" | cut -d'|' -f2-7,9
done
(cd $OUT && tar czf call6-ab.tgz wrule-base1 wrule-head wrule-base2 && rm -rf wrule-base1 wrule-head wrule-base2)
