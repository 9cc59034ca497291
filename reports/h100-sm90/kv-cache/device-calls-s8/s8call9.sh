#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro5
CELL=bf16:16:4:1:1024
for mode in countscratch keepscratch; do
  timeout 60 python devrun/repro_order.py $mode --timing graph --cells $CELL --configs 128x4x2 --splits 0 --peers flex,bundled_contiguous --out $OUT/repro5/$mode.jsonl > $OUT/repro5/$mode.log 2>&1
  echo "$mode rc=$? illegal=$(grep -c illegal $OUT/repro5/$mode.log) errors=$(grep -c '"error"' $OUT/repro5/$mode.jsonl)"; grep "scratch requests" $OUT/repro5/$mode.log
done
python -c "import torch, inspect; print('check_input_liveness' in inspect.signature(torch.cuda.CUDAGraph.capture_begin).parameters if hasattr(torch.cuda.CUDAGraph,'capture_begin') else None)" 2>&1 | tail -1
cd $OUT && tar czf call9.tgz repro5
