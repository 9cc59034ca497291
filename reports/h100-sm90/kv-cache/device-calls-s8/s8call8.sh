#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro4
CELL=bf16:16:4:1:1024
for mode in plain prebuild keepcache; do
  timeout 60 python devrun/repro_order.py $mode --timing graph --cells $CELL --configs 128x4x2 --splits 0 --peers flex,bundled_contiguous --out $OUT/repro4/$mode.jsonl > $OUT/repro4/$mode.log 2>&1
  echo "$mode rc=$? illegal=$(grep -c illegal $OUT/repro4/$mode.log) errors=$(grep -c '"error"' $OUT/repro4/$mode.jsonl)"
done
timeout 60 python devrun/repro_order.py keepcache --timing graph --cells $CELL --configs 128x4x2 --splits 0 --peers flex,flag_split_kv --out $OUT/repro4/keepcache-splitkv.jsonl > $OUT/repro4/keepcache-splitkv.log 2>&1
echo "keepcache-splitkv rc=$? illegal=$(grep -c illegal $OUT/repro4/keepcache-splitkv.log) errors=$(grep -c '"error"' $OUT/repro4/keepcache-splitkv.jsonl)"
cd $OUT && tar czf call8.tgz repro4
