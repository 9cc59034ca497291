#!/usr/bin/env bash
# Session 9, call 4: the fp16 graph-timed grid at HEAD (4 implementations: FlagAttention's split-KV answers bf16 in fp16 only).
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
python benchmarks/decode_benchmark.py --timing graph --dtypes fp16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-fp16 --budget 330 > $OUT/fp16.log 2>&1 || true
cp $OUT/fp16.log $OUT/benchmark-graph-fp16/run.log
grep -A10 "## Goals" $OUT/benchmark-graph-fp16/benchmark.md; grep "budget of" $OUT/fp16.log; tail -2 $OUT/fp16.log
cd $OUT && tar czf call4.tgz benchmark-graph-fp16 gpu.txt && rm -rf benchmark-graph-fp16
