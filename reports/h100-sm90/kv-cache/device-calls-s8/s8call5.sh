#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro
CELL=bf16:16:4:1:1024
for peers in flex bundled_contiguous "flex,bundled_contiguous"; do
  timeout 60 python devrun/repro_profile.py --timing graph --profile --peers $peers --cells $CELL --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 > $OUT/repro/peers-${peers/,/-}.log 2>&1; echo "peers $peers rc=$?"
  grep -B1 -A1 "Error\|illegal" $OUT/repro/peers-${peers/,/-}.log | head -5; grep -c " ok:" $OUT/repro/peers-${peers/,/-}.log
done
timeout 60 python devrun/repro_profile.py --timing graph --profile --cells $CELL --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 > $OUT/repro/bundled.log 2>&1; echo "bundled rc=$?"; grep -c " ok:" $OUT/repro/bundled.log; grep "illegal" $OUT/repro/bundled.log | head -2
cd $OUT && tar czf call5.tgz repro
