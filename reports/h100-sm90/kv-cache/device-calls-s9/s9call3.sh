#!/usr/bin/env bash
# Session 9, call 3: the bf16 graph-timed grid at HEAD (5 implementations), resumable (call 4 finishes it).
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
python benchmarks/decode_benchmark.py --timing graph --dtypes bf16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flag_split_kv,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-bf16 --budget 505 > $OUT/bf16.log 2>&1 || true
cp $OUT/bf16.log $OUT/benchmark-graph-bf16/run.log
grep -A12 "## Goals" $OUT/benchmark-graph-bf16/benchmark.md; grep "budget of" $OUT/bf16.log; tail -2 $OUT/bf16.log
cd $OUT && tar czf call3.tgz benchmark-graph-bf16 gpu.txt && rm -rf benchmark-graph-bf16
