#!/usr/bin/env bash
# Session 12, call 4 (H200): the working tree as landed (ALiBi raw units, bwd_dq.window): the variants
# benchmark's whole grid (fp16, bf16; Flex at S 8k), then the standard tier.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 370 python benchmarks/variants_benchmark.py --dtypes fp16,bf16 --flex-seq-lens 8192 --out $OUT/benchmark > $OUT/benchmark.log 2>&1; echo "bench rc=$? $(date +%T)"
mv $OUT/benchmark.log $OUT/benchmark/run.log
sed -n '/^## Targets/,/^## /p' $OUT/benchmark/benchmark.md | head -30
(cd $OUT && tar czf call4-bench.tgz benchmark gpu.txt && rm -rf benchmark)
mkdir -p $OUT/standard; timeout 190 python -m conformance run --tier standard --out $OUT/standard > $OUT/standard/run.log 2>&1; echo "standard rc=$? $(date +%T)"
tail -1 $OUT/standard/run.log
(cd $OUT && tar czf call4-standard.tgz standard && rm -rf standard)
