#!/usr/bin/env bash
# Session 9, call 1: kv standard + long tiers and the five kv mutants at HEAD (merge on online_softmax_weights);
# the merge's A/B against ec46e78 on small cells (profiled); ncu of the B 128 one-split cell (bundled vs Flex).
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/standard-kv; timeout 150 python -m conformance run --tier standard --op kv_cache_attention --out $OUT/standard-kv > $OUT/standard-kv/run.log 2>&1; echo "standard rc=$?"
tail -2 $OUT/standard-kv/run.log
mkdir -p $OUT/long-kv; timeout 120 python -m conformance run '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page16,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[fp16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq1,Sk131072,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B4,H32,Hkv8,Sq4,Sk65536,lens=mixed,page64,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B2,H32,Hkv8,Sq4,Sk131072,lse,lens=equal,seed0]' '--case=kv_cache_attention.fwd[bf16,d128,causal,B2,H32,Hkv8,Sq4,Sk131072,lse,lens=equal,splits16,seed0]'  --out $OUT/long-kv > $OUT/long-kv/run.log 2>&1; echo "long rc=$?"
tail -2 $OUT/long-kv/run.log
mkdir -p $OUT/mutants-kv; timeout 280 python -m mutants --tier standard --mutant kv_cache_merge_without_rescale --mutant kv_cache_empty_split_lse_zero --mutant kv_cache_last_page_unmasked --mutant kv_cache_page_index_off_by_one --mutant kv_cache_new_kv_one_slot_late --max-kills 1 -j 5 --out $OUT/mutants-kv > $OUT/mutants-kv/run.log 2>&1; echo "mutants rc=$?"
tail -8 $OUT/mutants-kv/run.log
(cd $OUT && tar czf call1-tiers.tgz standard-kv long-kv mutants-kv gpu.txt && rm -rf standard-kv long-kv mutants-kv)
# The merge: HEAD against ec46e78 (devrun/base), each cell in turn, base first then HEAD, profiled.
mkdir -p $OUT/merge-ab
CELLS="bf16:16:4:8:1024 bf16:16:4:1:1024 bf16:16:1:1:1024 bf16:16:1:8:1024 bf16:16:4:32:1024"
for cell in $CELLS; do
  (cd devrun/base && PYTHONPATH=. timeout 45 python benchmarks/decode_probe.py --timing graph --profile --cells $cell --configs 128x4x2 --splits 0 --out $OUT/merge-ab/base.jsonl >> $OUT/merge-ab/base.log 2>&1); echo "base $cell rc=$?"
  timeout 45 python benchmarks/decode_probe.py --timing graph --profile --cells $cell --configs 128x4x2 --splits 0 --out $OUT/merge-ab/head.jsonl >> $OUT/merge-ab/head.log 2>&1; echo "head $cell rc=$?"
done
python - <<'P'
import json, os
o = os.environ["OUT"] + "/merge-ab/"
for name in ("base", "head"):
    for l in open(o + name + ".jsonl"):
        d = json.loads(l)
        if "ms" in d:
            print(name, d["cell"], d["variant"], round(d["ms"] * 1000, 2), {k[:14]: round(v[1], 2) for k, v in d.get("kernels", {}).items()})
P
(cd $OUT && tar czf call1-merge.tgz merge-ab)
# Two cells through the supervisor (one child each) with a peer: the per-cell isolation once on a GPU.
mkdir -p $OUT/two-cells
timeout 60 python benchmarks/decode_probe.py --timing graph --cells bf16:16:1:128:1024,bf16:16:4:128:1024 --configs 64x4x4,64x8x2 --splits 0 --peers flex,bundled_contiguous --profile --out $OUT/two-cells/probe.jsonl > $OUT/two-cells/probe.log 2>&1; echo "two cells rc=$?"
grep -v Warn $OUT/two-cells/probe.log | grep "B128"
# ncu: the B 128, 1k one-split cell, bundled (paged, contiguous) against Flex.
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu 2>/dev/null)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  for impl in bundled_unchecked bundled_contiguous flex; do
    timeout 60 $NCU --target-processes all --kernel-name regex:"decode_split|flex_attention_0" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      python devrun/ncu_cell.py $impl bf16:16:1:128:1024 > $OUT/two-cells/ncu-$impl.txt 2>&1; echo "ncu $impl rc=$?"
  done
fi
(cd $OUT && tar czf call1-probe.tgz two-cells)
