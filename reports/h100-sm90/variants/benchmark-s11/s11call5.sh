#!/usr/bin/env bash
# Session 11, call 5: the variants benchmark on the session's final kernels (softcap's cubic reciprocal and
# folded cap; bwd_dq.varlen), the dtypes (fp16, bf16), FlexAttention at S 8192 only (device time).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 430 python benchmarks/variants_benchmark.py --dtypes fp16,bf16 --flex-seq-lens 8192 --out $OUT/benchmark > $OUT/benchmark.log 2>&1; echo "bench rc=$? $(date +%T)"
mv $OUT/benchmark.log $OUT/benchmark/run.log
sed -n '/^## Targets/,/^## Sliding/p' $OUT/benchmark/benchmark.md
(cd $OUT && tar czf call5-bench.tgz benchmark gpu.txt && rm -rf benchmark)
