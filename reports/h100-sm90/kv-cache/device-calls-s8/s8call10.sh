#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro6
run() { name=$1; shift; timeout 90 python benchmarks/decode_probe.py --timing graph --out $OUT/repro6/$name.jsonl "$@" > $OUT/repro6/$name.log 2>&1; echo "$name rc=$? illegal=$(grep -c illegal $OUT/repro6/$name.log) errors=$(grep -c '"error"' $OUT/repro6/$name.jsonl)"; }
run splitkv-then-flex --cells bf16:16:4:1:1024 --configs 128x4x2 --splits 0 --peers flag_split_kv,flex
run session7-flex-last --cells bf16:16:1:1:1024,bf16:16:1:1:4096 --configs 32x4x2,64x4x2,128x4x2 --splits 0,4,8,16,32 --peers flag_paged,flag_split_kv,flex
run all-flex-last --cells bf16:16:4:1:1024,bf16:16:1:1:4096 --configs 128x4x2 --splits 0,8 --peers bundled_contiguous,flag_paged,flag_split_kv,flex
cd $OUT && tar czf call10.tgz repro6
