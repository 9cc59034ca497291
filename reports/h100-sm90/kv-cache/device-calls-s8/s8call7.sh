#!/usr/bin/env bash
set -u
FA=.peers/FlagAttention/src
export PYTHONPATH=.:$FA
mkdir -p $OUT/repro3
CELL=bf16:16:4:1:1024
run() { name=$1; shift; timeout 60 python benchmarks/decode_probe.py --cells $CELL --configs 128x4x2 --splits 0 --out $OUT/repro3/$name.jsonl "$@" > $OUT/repro3/$name.log 2>&1; echo "$name rc=$? illegal=$(grep -c illegal $OUT/repro3/$name.log) errors=$(grep -c '"error"' $OUT/repro3/$name.jsonl)"; }
run graph-flex-first --timing graph --peers flex,bundled_contiguous
run graph-contiguous-first --timing graph --peers bundled_contiguous,flex
run eager-flex-first --timing eager --peers flex,bundled_contiguous
run graph-flex-splitkv --timing graph --peers flex,flag_split_kv
python - <<'P'
import json, os, glob
for path in sorted(glob.glob(os.environ["OUT"] + "/repro3/*.jsonl")):
    for line in open(path):
        d = json.loads(line)
        print(os.path.basename(path), d["variant"], d.get("error", "")[:160] or f'{d.get("bandwidth", 0)/1e9:.0f} GB/s')
P
S=/usr/local/cuda/bin/compute-sanitizer
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 $S --tool memcheck --print-limit 8 python benchmarks/decode_probe.py --timing eager --cells $CELL --configs 128x4x2 --splits 0 --peers flex,bundled_contiguous --out $OUT/repro3/sanitizer-nocache.jsonl > $OUT/repro3/sanitizer-nocache.log 2>&1; echo "sanitizer rc=$?"
grep -m8 -A14 "Invalid\|ERROR SUMMARY" $OUT/repro3/sanitizer-nocache.log | cut -c1-200 | head -70
cd $OUT && tar czf call7.tgz repro3
