#!/usr/bin/env bash
# Session 9, call 2: two-warp split-kernel configurations (never probed: the a6624e3 grid had 4 and 8 warps)
# against the table's 128x4x2, over cells from one split (B 128) to deep splits (B 1, 128k); Flex and the
# contiguous cache beside them. ncu of 64x2 / 128x2 at B 128, 1k if ncu is there.
set -u
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $OUT/gpu.txt 2>&1
mkdir -p $OUT/warps
CONFIGS=128x4x2,64x4x4,128x2x2,128x2x3,64x2x2,64x2x3,64x2x4,32x2x3,32x2x4
for cell in bf16:16:1:128:1024 bf16:16:4:128:1024 bf16:16:1:128:4096 bf16:16:1:32:4096 bf16:16:1:8:1024 bf16:16:4:8:1024 bf16:16:1:1:4096 bf16:16:1:8:16384 bf16:16:1:1:131072 bf16:64:1:128:1024; do
  timeout 75 python benchmarks/decode_probe.py --timing graph --profile --cells $cell --configs $CONFIGS --splits 0 --peers flex,bundled_contiguous --out $OUT/warps/probe.jsonl >> $OUT/warps/probe.log 2>&1; echo "$cell rc=$?"
done
grep -v "Warn\|warn_once" $OUT/warps/probe.log | grep "ctx"
python - <<'P'
import json, os
for l in open(os.environ["OUT"] + "/warps/probe.jsonl"):
    d = json.loads(l)
    if "ms" in d:
        print(d["cell"], d["variant"], round(d["ms"] * 1000, 1), f'{d["bandwidth"] / d["copy_bandwidth"]:.3f}', {k[:12]: round(v[1], 1) for k, v in d.get("kernels", {}).items()})
P
(cd $OUT && tar czf call2.tgz warps gpu.txt)
