#!/usr/bin/env bash
# Session 10, call 1: variant-shift.diff (a run-time shift and mask for power-of-two pages; working tree)
# against 73d81a6 (devrun/base, kernels as 0caa000): the split kernel's time A/B over one-split, split and
# deep-split cells (profiled, base first then head, per cell), then the kv standard tier, the three page and
# append mutants and the long kv cases at the working tree.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/page-ab
for cell in bf16:16:1:128:1024 bf16:16:4:128:1024 bf16:64:1:128:1024 bf16:64:4:128:1024 bf16:16:1:128:4096 bf16:64:4:128:4096 bf16:16:1:1:131072 bf16:16:1:8:16384 bf16:16:1:32:4096; do
  (cd devrun/base && PYTHONPATH=. timeout 40 python benchmarks/decode_probe.py --timing graph --profile --cells $cell --configs 128x4x2 --splits 0 --out $OUT/page-ab/base.jsonl >> $OUT/page-ab/base.log 2>&1); echo "base $cell rc=$?"
  timeout 40 python benchmarks/decode_probe.py --timing graph --profile --cells $cell --configs 128x4x2 --splits 0 --out $OUT/page-ab/head.jsonl >> $OUT/page-ab/head.log 2>&1; echo "head $cell rc=$?"
done
python - <<'P'
import json, os
o = os.environ["OUT"] + "/page-ab/"
rows = {}
for name in ("base", "head"):
    for l in open(o + name + ".jsonl"):
        d = json.loads(l)
        if "ms" in d:
            rows.setdefault(d["cell"], {}).setdefault(name, []).append((round(d["ms"] * 1000, 1), round(d.get("kernels", {}).get("decode_split_kernel", [0, 0])[1], 1)))
for cell, r in rows.items():
    print(cell, r)
P
(cd $OUT && tar czf call1-ab.tgz page-ab gpu.txt)
mkdir -p $OUT/standard-kv; timeout 120 python -m conformance run --tier standard --op kv_cache_attention --out $OUT/standard-kv > $OUT/standard-kv/run.log 2>&1; echo "standard rc=$?"
tail -1 $OUT/standard-kv/run.log
(cd $OUT && tar czf call1-standard.tgz standard-kv)
mkdir -p $OUT/mutants-kv; timeout 150 python -m mutants --tier standard --mutant kv_cache_last_page_unmasked --mutant kv_cache_page_index_off_by_one --mutant kv_cache_new_kv_one_slot_late --max-kills 1 -j 3 --out $OUT/mutants-kv > $OUT/mutants-kv/run.log 2>&1; echo "mutants rc=$?"
tail -3 $OUT/mutants-kv/run.log
(cd $OUT && tar czf call1-mutants.tgz mutants-kv)
mkdir -p $OUT/long-kv; timeout 100 python -m conformance run '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B2,H32,Hkv8,Sq4,Sk131072,lse,lens=equal,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B2,H32,Hkv8,Sq4,Sk131072,lse,lens=equal,splits16,seed0]'  --out $OUT/long-kv > $OUT/long-kv/run.log 2>&1; echo "long rc=$?"
tail -2 $OUT/long-kv/run.log
(cd $OUT && tar czf call1-long.tgz long-kv)
