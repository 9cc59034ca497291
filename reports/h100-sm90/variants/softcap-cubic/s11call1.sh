#!/usr/bin/env bash
# Session 11, call 1: benchmarks only. Working tree = 79b49ce + alibi-exact-float + softcap-fold-cubic;
# devrun/base = git archive 79b49ce. ALiBi cells base1 / head / base2 (no Flex); softcap + softcap_large
# cells base (no Flex) then head (with Flex: softcap_large's first GPU run).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
for run in base1 head base2; do
  if [ $run = head ]; then dir=.; else dir=devrun/base; fi
  (cd $dir && PYTHONPATH=. timeout 110 python benchmarks/variants_benchmark.py --variants alibi --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/alibi-$run > $OUT/alibi-$run.log 2>&1); echo "alibi $run rc=$? $(date +%T)"
  mv $OUT/alibi-$run.log $OUT/alibi-$run/run.log
  echo "== $run"; sed -n '/^## ALiBi/,/^## /p' $OUT/alibi-$run/benchmark.md | grep "^| [fb]"
done
(cd $OUT && tar czf call1-alibi.tgz alibi-base1 alibi-head alibi-base2 gpu.txt && rm -rf alibi-base1 alibi-head alibi-base2)
(cd devrun/base && PYTHONPATH=. timeout 120 python benchmarks/variants_benchmark.py --variants softcap,softcap_large --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/softcap-base > $OUT/softcap-base.log 2>&1); echo "softcap base rc=$? $(date +%T)"
timeout 220 python benchmarks/variants_benchmark.py --variants softcap,softcap_large --dtypes fp16,bf16 --out $OUT/softcap-head > $OUT/softcap-head.log 2>&1; echo "softcap head rc=$? $(date +%T)"
mv $OUT/softcap-base.log $OUT/softcap-base/run.log; mv $OUT/softcap-head.log $OUT/softcap-head/run.log
for d in base head; do echo "== $d"; sed -n '/^## Softcap/,/^## ALiBi/p' $OUT/softcap-$d/benchmark.md | grep "^| [fb]"; done
(cd $OUT && tar czf call1-softcap.tgz softcap-base softcap-head && rm -rf softcap-base softcap-head)
