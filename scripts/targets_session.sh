#!/usr/bin/env bash
# The device steps of issue 32 after the head-dim slicing (kernels/head_slices.py), each a run
# folder under reports/runs/targets/, packed into $OUT/targets.tgz with the logs after every step.
#
#   FA_HARNESS_REVISION=<commit> bash scripts/targets_session.sh STEP...
#
#   standard      the H100 standard tier, then `diff` against the published standard run: the
#                 kernels' score products were restructured, the verdicts must not change
#   sliced-gpu    tests/test_head_slices.py on the GPU: every slicing kernel configured to slice
#                 the head dim, judged by the rule on hardware (no RDNA card here; NVIDIA runs the
#                 same Triton code path)
#   compile-full  the compile-only tier, full scope, for the nine targets of issue 32 (CPU only)
#   sweep-cuda    the compile-only tier, sweep scope, for the NVIDIA targets (CPU only)
#   sweep-sm120   the sweep scope for sm_120 alone (sweep-cuda's last target, where a call ran out)
#   sweep-cdna    the compile-only tier, sweep scope, for the CDNA targets (CPU only)
#   sweep-gfx950  the sweep scope for gfx950 alone (sweep-cdna's last target, where a call ran out)
#   sweep-rdna    the compile-only tier, sweep scope, for the RDNA targets (CPU only)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/targets
mkdir -p "$RUNS" "$OUT"

source scripts/steps.sh  # step / packed_step NAME COMMAND..., pack_runs
NVIDIA=sm_80,sm_90,sm_100,sm_120
CDNA=gfx90a,gfx942,gfx950
RDNA=gfx1100,gfx1201

for name in "$@"; do
  case "$name" in
    standard) packed_step "$name" python -m conformance run --tier standard --out "$RUNS/$name"
              step diff-standard python -m conformance diff reports/h100-sm90/standard "$RUNS/$name" ;;
    sliced-gpu) packed_step "$name" python -m pytest -p no:cacheprovider -v tests/test_head_slices.py ;;
    compile-full) packed_step "$name" python -m conformance compile --scope full -n 16 --target "$NVIDIA,$CDNA,$RDNA" \
                    --out "$RUNS/$name" ;;
    sweep-cuda) packed_step "$name" python -m conformance compile --scope sweep -n 16 --target "$NVIDIA" \
                  --out "$RUNS/$name" ;;
    sweep-sm120) packed_step "$name" python -m conformance compile --scope sweep -n 16 --target sm_120 \
                   --out "$RUNS/$name" ;;
    sweep-cdna) packed_step "$name" python -m conformance compile --scope sweep -n 16 --target "$CDNA" \
                  --out "$RUNS/$name" ;;
    sweep-gfx950) packed_step "$name" python -m conformance compile --scope sweep -n 16 --target gfx950 \
                    --out "$RUNS/$name" ;;
    sweep-rdna) packed_step "$name" python -m conformance compile --scope sweep -n 16 --target "$RDNA" \
                  --out "$RUNS/$name" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
pack_runs
cat "$RUNS/steps.log"
