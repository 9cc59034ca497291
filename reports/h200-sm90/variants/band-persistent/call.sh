#!/usr/bin/env bash
# device call 1: the flattened band forward prototype
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT/proto
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/proto/gpu.txt
timeout 420 python devrun/flat_proto.py $OUT/proto/proto.jsonl > $OUT/proto/proto.log 2>&1
echo rc=$? >> $OUT/proto/proto.log
tail -5 $OUT/proto/proto.log
