#!/usr/bin/env bash
# Session 9, call 5: the fp16 grid of call 4 resumed (its results carried in devrun/), same command.
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
cp -r devrun/benchmark-graph-fp16 $OUT/
python benchmarks/decode_benchmark.py --timing graph --dtypes fp16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-fp16 --budget 400 > $OUT/fp16-resume.log 2>&1 || true
cp $OUT/fp16-resume.log $OUT/benchmark-graph-fp16/run-resume.log
grep -A10 "## Goals" $OUT/benchmark-graph-fp16/benchmark.md; grep "budget of" $OUT/fp16-resume.log; tail -2 $OUT/fp16-resume.log
cd $OUT && tar czf call5.tgz benchmark-graph-fp16 gpu.txt && rm -rf benchmark-graph-fp16
