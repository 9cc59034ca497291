#!/usr/bin/env bash
# Session 12, call 3 (H200): working tree = 2c801c7 + ALiBi raw units + bwd_dq.window (64x64 w4 s2 tma at D 64 / 128);
# devrun/base = git archive 2c801c7 (dense dQ rows for windows). Window cells base1 / head / base2 (no Flex),
# then the standard tier's window cases x 4 seeds on the working tree.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
for run in base1 head base2; do
  if [ $run = head ]; then dir=.; else dir=devrun/base; fi
  (cd $dir && PYTHONPATH=. timeout 140 python benchmarks/variants_benchmark.py --variants window --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/window-$run > $OUT/window-$run.log 2>&1); echo "window $run rc=$? $(date +%T)"
  mv $OUT/window-$run.log $OUT/window-$run/run.log
  echo "== $run"; sed -n '/^## Sliding/,/^## /p' $OUT/window-$run/benchmark.md | grep "^| [fb]" | cut -d'|' -f2-7,9
done
(cd $OUT && tar czf call3-window.tgz window-base1 window-head window-base2 gpu.txt && rm -rf window-base1 window-head window-base2)
python -m conformance list --tier standard | grep "win[0-9]" > $OUT/window-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/window-cases.txt
mkdir -p $OUT/window-seeds; timeout 100 python -m conformance run --seeds 4 "${args[@]}" --out $OUT/window-seeds > $OUT/window-seeds/run.log 2>&1; echo "seeds rc=$? $(date +%T)"
tail -1 $OUT/window-seeds/run.log
(cd $OUT && tar czf call3-seeds.tgz window-seeds window-cases.txt && rm -rf window-seeds)
