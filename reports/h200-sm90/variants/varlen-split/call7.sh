#!/usr/bin/env bash
# Session 13, call 7 (H200): the varlen split probe at 092272f
set -u
export PYTHONPATH=. FA_HARNESS_REVISION=092272f
mkdir -p $OUT/varlen-split
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/varlen-split/gpu.txt
timeout 330 python devrun/varlen_split.py $OUT/varlen-split/split.jsonl > $OUT/varlen-split/run.log 2>&1
echo "rc=$?" >> $OUT/varlen-split/run.log
tail -4 $OUT/varlen-split/run.log | cut -c1-300
