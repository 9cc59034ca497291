#!/usr/bin/env bash
# Session 8, call 4: which variant of a two-cell probe makes the illegal access (launch-blocking);
# the profiled probe of the cells behind FlexAttention, one process per cell; the fp16 grid resumed.
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/probe $OUT/bisect
TWO=bf16:16:1:1:4096,bf16:16:4:1:1024
CUDA_LAUNCH_BLOCKING=1 timeout 80 python benchmarks/decode_probe.py --timing graph --cells $TWO --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 --out $OUT/bisect/bundled-only.jsonl > $OUT/bisect/bundled-only.log 2>&1; echo "bundled-only rc=$?"; grep -c error $OUT/bisect/bundled-only.jsonl
CUDA_LAUNCH_BLOCKING=1 timeout 60 python benchmarks/decode_probe.py --timing graph --cells $TWO --configs 128x4x2 --splits 0 --peers flex --out $OUT/bisect/flex.jsonl > $OUT/bisect/flex.log 2>&1; echo "flex rc=$?"; grep -c error $OUT/bisect/flex.jsonl
CUDA_LAUNCH_BLOCKING=1 timeout 60 python benchmarks/decode_probe.py --timing graph --cells $TWO --configs 128x4x2 --splits 0 --peers bundled_contiguous --out $OUT/bisect/contiguous.jsonl > $OUT/bisect/contiguous.log 2>&1; echo "contiguous rc=$?"; grep -c error $OUT/bisect/contiguous.jsonl
for cell in bf16:16:1:1:4096 bf16:16:4:1:1024 bf16:16:1:128:1024 bf16:16:1:128:4096 bf16:16:4:8:1024; do
  timeout 60 python benchmarks/decode_probe.py --timing graph --profile --peers flex,flag_paged,bundled_contiguous --cells $cell \
    --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 --out $OUT/probe/probe.jsonl >> $OUT/probe/probe.log 2>&1; echo "probe $cell rc=$?"
done
grep "best" $OUT/probe/probe.log
cp -r devrun/benchmark-graph-fp16 $OUT/
python benchmarks/decode_benchmark.py --timing graph --dtypes fp16 \
  --impls bundled_unchecked,bundled_contiguous,flag_paged,flex \
  --flag-attention $FA --out $OUT/benchmark-graph-fp16 --budget 200 > $OUT/fp16-resume.log 2>&1 || true
cp $OUT/fp16-resume.log $OUT/benchmark-graph-fp16/run-resume.log
grep -A10 "## Goals" $OUT/benchmark-graph-fp16/benchmark.md; grep "budget of" $OUT/fp16-resume.log
cd $OUT && tar czf call4.tgz benchmark-graph-fp16 probe bisect && rm -rf benchmark-graph-fp16 probe bisect
