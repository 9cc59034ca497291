#!/usr/bin/env bash
# One device call on a multi-GPU machine (issue 21): the standard tier with one xdist worker
# per GPU, a like-for-like wall-time pair (the piecewise cases with -n 1 and -n N), and the
# crash-isolation kernel next to normal cases across the GPUs.  Everything lands in
# $OUT/runs.tgz (the device returns at most 8 files).
#   FA_HARNESS_REVISION=<commit> bash scripts/multi_gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; RUNS=$OUT/runs; mkdir -p "$RUNS"
GPUS=$(python -c "import torch; print(torch.cuda.device_count())")
nvidia-smi -L > "$RUNS/gpus.txt"; cat "$RUNS/gpus.txt"
timed() {  # name, limit, arguments...
  local name=$1 limit=$2; shift 2; local started=$(date +%s)
  timeout "$limit" python -m conformance run "$@" --out "$RUNS/$name" > "$RUNS/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - started )) s" | tee -a "$RUNS/steps.log"
}
timed standard-x$GPUS 290 --tier standard -n "$GPUS"
timed piecewise-n1 100 --tier standard --op piecewise_attention -n 1
timed piecewise-n$GPUS 100 --tier standard --op piecewise_attention -n "$GPUS"
crash=(); for case in 'fwd[fp16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' 'fwd[fp16,d64,causal,B2,H8,Hkv2,Sq128,Sk128,seed0]' \
    'bwd[fp16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' 'bwd[fp16,d64,causal,B2,H8,Hkv2,Sq128,Sk128,seed0]' \
    'fwd[fp16,d128,noncausal,B2,H8,Hkv8,Sq128,Sk128,seed0]' 'bwd[fp16,d128,noncausal,B2,H8,Hkv8,Sq128,Sk128,seed0]'; do
  crash+=(--case "flash_attention.$case"); done
timed crash-x$GPUS 120 -n "$GPUS" --case-timeout 60 \
    --kernel flash_attention=conformance.bundled.mutants.registry:flash_attention_crash "${crash[@]}"
python - "$RUNS" <<'PY'
import collections, json, pathlib, sys
for run in sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if (p / "results.jsonl").exists()):
    lines = [json.loads(t) for t in (run / "results.jsonl").read_text().splitlines()]
    cases = [l for l in lines if l.get("kind", "case") == "case"]
    print(run.name, "per GPU", dict(collections.Counter(l.get("device_index") for l in cases)),
          dict(collections.Counter(l["verdict"] for l in cases)))
    if run.name.startswith("crash"):
        for l in cases:
            print("  ", l["case"], l["verdict"], "gpu", l.get("device_index"), (l.get("reason") or "")[:90])
PY
tar czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$RUNS"
