#!/usr/bin/env bash
# Session 11, call 4: the varlen tables from call 3's sweeps (fwd.varlen D 64 -> 128x64 w8 s3, the dense
# row; bwd_dq.varlen D 64 64x64 w4 s3 descriptors) against 79b49ce's (devrun/base): the variants
# benchmark's varlen cells base1 / head / base2 (no Flex); the standard tier's varlen cases x 4 seeds; the
# varlen mutant.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
for run in base1 head base2; do
  if [ $run = head ]; then dir=.; else dir=devrun/base; fi
  (cd $dir && PYTHONPATH=. timeout 110 python benchmarks/variants_benchmark.py --variants varlen --dtypes fp16,bf16 --flex-seq-lens none --out $OUT/varlen-$run > $OUT/varlen-$run.log 2>&1); echo "varlen $run rc=$? $(date +%T)"
  mv $OUT/varlen-$run.log $OUT/varlen-$run/run.log
  echo "== $run"; sed -n '/^## Variable-length/,/^## /p' $OUT/varlen-$run/benchmark.md | grep "^| [fb]"
done
(cd $OUT && tar czf call4-bench.tgz varlen-base1 varlen-head varlen-base2 gpu.txt && rm -rf varlen-base1 varlen-head varlen-base2)
python -m conformance list --tier standard | grep varlen > $OUT/varlen-cases.txt
args=(); while read -r c; do args+=("--case=$c"); done < $OUT/varlen-cases.txt
mkdir -p $OUT/varlen-seeds; timeout 150 python -m conformance run --seeds 4 "${args[@]}" --out $OUT/varlen-seeds > $OUT/varlen-seeds/run.log 2>&1; echo "seeds rc=$? $(date +%T)"
tail -1 $OUT/varlen-seeds/run.log
(cd $OUT && tar czf call4-seeds.tgz varlen-seeds varlen-cases.txt && rm -rf varlen-seeds)
mkdir -p $OUT/mutants; timeout 100 python -m mutants --tier standard --mutant varlen_keys_of_next_sequence --max-kills 1 -j 1 --out $OUT/mutants > $OUT/mutants/run.log 2>&1; echo "mutants rc=$? $(date +%T)"
tail -3 $OUT/mutants/run.log
(cd $OUT && tar czf call4-mutants.tgz mutants && rm -rf mutants)
