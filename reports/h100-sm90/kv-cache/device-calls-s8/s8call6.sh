#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro2
CELL=bf16:16:4:1:1024
(which compute-sanitizer; ls /usr/local/cuda*/bin/compute-sanitizer; find / -name compute-sanitizer -type f 2>/dev/null | head -2) > $OUT/repro2/sanitizer.txt 2>&1
cat $OUT/repro2/sanitizer.txt
run() { name=$1; shift; timeout 60 python devrun/repro_profile.py --timing graph --cells $CELL "$@" > $OUT/repro2/$name.log 2>&1; echo "$name rc=$? $(grep -c illegal $OUT/repro2/$name.log)"; }
run min-both --peers flex,bundled_contiguous --configs 128x4x2 --splits 0
run splits-both --peers flex,bundled_contiguous --configs 128x4x2 --splits 0,8,16,32
run configs-both --peers flex,bundled_contiguous --configs 64x4x2,128x4x2,128x4x3 --splits 0
run again-full --peers flex,bundled_contiguous --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32
FA_JIT_LAUNCH=1 run jit-full --peers flex,bundled_contiguous --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32
S=$(head -1 $OUT/repro2/sanitizer.txt)
if [ -x "$S" ]; then timeout 200 $S --tool memcheck --print-limit 5 python devrun/repro_profile.py --timing graph --cells $CELL --peers flex,bundled_contiguous --configs 64x4x2,128x4x2,128x4x3 --splits 0,8,16,32 > $OUT/repro2/sanitizer.log 2>&1; echo "sanitizer rc=$?"; grep -m5 -A12 "Invalid\|=========" $OUT/repro2/sanitizer.log | head -60; fi
cd $OUT && tar czf call6.tgz repro2
