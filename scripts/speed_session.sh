#!/usr/bin/env bash
# The device steps of issue 29 (the harness's own speed), one after the other (they time the
# GPU: nothing else runs beside them), each a run folder under reports/runs/speed/, packed
# into $OUT/speed.tgz with the logs (the device returns at most 8 files).
#
#   FA_HARNESS_REVISION=<commit> bash scripts/speed_session.sh STEP...
#
# Steps (the Triton cache is the folder conformance.running.triton_cache picks under
# FA_TRITON_CACHE=$CACHE_ROOT/<cache>; a fresh machine starts with none):
#   before    the standard tier as runs went before: -n 0 (no xdist, one process), cache `before` (cold)
#   cold      the README command's run (workers by the plan), cache `shared`, which must be empty (cold)
#   warm      the same again, cache `shared` (warm)
#   n1        -n 1, cache `shared` (warm)
#   cold-nN, warm-nN   -n N, cache `nN` (cold the first time, then warm): the worker plan's limits
#   crash     the worker plan on the GPU; 24 cases, 4 of them crash the `crash` mutant (an illegal address)
#   hang      the worker plan on the GPU; 24 cases, 4 of them hang in the `hang` mutant (30 s limit)
#   bench     benchmarks/harness_speed.py on the standard tier, cache `shared`
# Every standard-tier step is diffed against the committed reports/h100-sm90/standard.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/speed
CACHE_ROOT=${CACHE_ROOT:-/tmp/fa-triton-cache}
BASELINE=${BASELINE:-reports/h100-sm90/standard}
mkdir -p "$RUNS" "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$RUNS/machine.txt" 2>&1

source scripts/steps.sh  # step NAME COMMAND...
STEP_TIMEOUT=590

cached_step() {  # name, cache, command...: a step whose Triton cache is $CACHE_ROOT/<cache>
  local name=$1 cache=$2; shift 2
  echo "== $name uses the Triton cache $cache" | tee -a "$RUNS/steps.log"
  FA_TRITON_CACHE="$CACHE_ROOT/$cache" step "$name" "$@"
}

isolation_cases() {  # the cases of the crash/hang steps: 4 that trigger the mutant ($1: Sq1 or Sk1), 20 that do not
  local trigger=$1
  for d in 16 32 64 128; do for mask in causal noncausal; do
    echo "--case=flash_attention.fwd[fp16,d$d,$mask,B2,H4,Hkv2,Sq128,Sk128,seed0]"
    echo "--case=flash_attention.fwd[bf16,d$d,$mask,B1,H4,Hkv4,Sq200,Sk300,seed0]"
  done; done
  for d in 32 64; do for mask in causal noncausal; do
    echo "--case=flash_attention.bwd[fp16,d$d,$mask,B1,H4,Hkv2,Sq100,Sk100,seed0]"
  done; done
  for d in 64 128; do for dtype in fp16 bf16; do
    if [ "$trigger" = Sk1 ]; then echo "--case=flash_attention.fwd[$dtype,d$d,causal,B2,H4,Hkv2,Sq64,Sk1,seed0]"
    else echo "--case=flash_attention.fwd[$dtype,d$d,noncausal,B2,H4,Hkv2,Sq1,Sk500,seed0]"; fi
  done; done
}

for name in "$@"; do
  case "$name" in
    before) cached_step before before python -m conformance run --tier standard -n 0 --out "$RUNS/before" ;;
    cold) cached_step cold shared python -m conformance run --tier standard --out "$RUNS/cold" ;;
    cold-n*) n=${name#cold-n}; cached_step "$name" "n$n" python -m conformance run --tier standard -n "$n" --out "$RUNS/$name" ;;
    warm-n*) n=${name#warm-n}; cached_step "$name" "n$n" python -m conformance run --tier standard -n "$n" --out "$RUNS/$name" ;;
    warm) cached_step warm shared python -m conformance run --tier standard --out "$RUNS/warm" ;;
    n1) cached_step n1 shared python -m conformance run --tier standard -n 1 --out "$RUNS/n1" ;;
    crash) mapfile -t ids < <(isolation_cases Sk1)
           cached_step crash crash python -m conformance run --case-timeout 120 \
             --kernel flash_attention=mutants.registry:flash_attention_crash "${ids[@]}" --out "$RUNS/crash" ;;
    hang) mapfile -t ids < <(isolation_cases Sq1)
          cached_step hang hang python -m conformance run --case-timeout 30 \
            --kernel flash_attention=mutants.registry:flash_attention_hang "${ids[@]}" --out "$RUNS/hang" ;;
    bench) cached_step bench shared python benchmarks/harness_speed.py --tier standard --out "$RUNS/harness-speed" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log"; continue ;;
  esac
  if [ -f "$RUNS/$name/results.jsonl" ] && [ "$name" != crash ] && [ "$name" != hang ] && [ "$name" != bench ]; then
    python -m conformance diff "$BASELINE" "$RUNS/$name" > "$RUNS/$name/diff-against-baseline.txt" 2>&1
    tail -3 "$RUNS/$name/diff-against-baseline.txt" | tee -a "$RUNS/steps.log"
  fi
done
tar czf "$OUT/speed.tgz" -C reports/runs speed
cat "$RUNS/steps.log"
