#!/usr/bin/env bash
# device call 4: the whole mutant kill table at c39e9b6 (one kill each, up to the standard tier)
set -u
export FA_HARNESS_REVISION=c39e9b6
mkdir -p $OUT/mutants-s13
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/mutants-s13/gpu.txt
timeout 540 python -m mutants --tier standard --max-kills 1 -j 4 --out $OUT/mutants-s13 > $OUT/mutants-s13/run.log 2>&1
echo "exit $?" >> $OUT/mutants-s13/run.log
tail -8 $OUT/mutants-s13/run.log
