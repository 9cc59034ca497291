#!/usr/bin/env bash
# Session 8, call 3: finish the bf16 grid; probe (profiled) the cells behind FlexAttention; the fp16 grid as budget allows.
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
cp -r devrun/benchmark-graph-bf16 $OUT/
python benchmarks/decode_benchmark.py --timing graph --dtypes bf16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flag_split_kv,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-bf16 --budget 200 > $OUT/bf16-resume.log 2>&1 || true
cp $OUT/bf16-resume.log $OUT/benchmark-graph-bf16/run-resume.log
grep -A10 "## Goals" $OUT/benchmark-graph-bf16/benchmark.md; grep "budget of" $OUT/bf16-resume.log
mkdir -p $OUT/probe
timeout 170 python benchmarks/decode_probe.py --timing graph --profile --peers flex,flag_paged,bundled_contiguous \
  --cells bf16:16:1:1:4096,bf16:16:4:1:1024,bf16:16:1:128:1024,bf16:16:1:128:4096,bf16:16:4:8:1024 \
  --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 --out $OUT/probe/probe.jsonl > $OUT/probe/probe.log 2>&1; echo "probe rc=$?"
tail -3 $OUT/probe/probe.log
python benchmarks/decode_benchmark.py --timing graph --dtypes fp16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-fp16 --budget 150 > $OUT/fp16.log 2>&1 || true
cp $OUT/fp16.log $OUT/benchmark-graph-fp16/run.log
grep -A10 "## Goals" $OUT/benchmark-graph-fp16/benchmark.md; grep "budget of" $OUT/fp16.log
cd $OUT && tar czf call3.tgz benchmark-graph-bf16 benchmark-graph-fp16 probe && rm -rf benchmark-graph-bf16 benchmark-graph-fp16 probe
