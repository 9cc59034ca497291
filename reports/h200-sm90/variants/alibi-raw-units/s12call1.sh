#!/usr/bin/env bash
# Session 12, call 1 (H200): working tree = 2c801c7 + ALiBi scores in raw units (kernels/scores.py);
# devrun/base = git archive 2c801c7. ALiBi cells base1 / head / base2 (no Flex), then the standard tier
# on the working tree.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" >> $OUT/gpu.txt 2>&1
for run in base1 head base2; do
  if [ $run = head ]; then dir=.; else dir=devrun/base; fi
  (cd $dir && PYTHONPATH=. timeout 110 python benchmarks/variants_benchmark.py --variants alibi --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/alibi-$run > $OUT/alibi-$run.log 2>&1); echo "alibi $run rc=$? $(date +%T)"
  mv $OUT/alibi-$run.log $OUT/alibi-$run/run.log
  echo "== $run"; sed -n '/^## ALiBi/,/^## /p' $OUT/alibi-$run/benchmark.md | grep "^| [fb]"
done
(cd $OUT && tar czf call1-alibi.tgz alibi-base1 alibi-head alibi-base2 gpu.txt && rm -rf alibi-base1 alibi-head alibi-base2)
mkdir -p $OUT/standard; timeout 230 python -m conformance run --tier standard --out $OUT/standard > $OUT/standard/run.log 2>&1; echo "standard rc=$? $(date +%T)"
tail -2 $OUT/standard/run.log
(cd $OUT && tar czf call1-standard.tgz standard && rm -rf standard)
