#!/usr/bin/env bash
# One device call of a session: the named steps, each a run folder under reports/runs/device/,
# all of them packed into $OUT/runs.tgz with their logs (the device returns at most 8 files).
#
#   FA_HARNESS_REVISION=<commit> bash scripts/device_session.sh STEP...
#
# Steps: standard | mutants | long | flake | sdpa-flash | sdpa-cudnn | sdpa-efficient | sdpa-math
# (the sdpa steps run in parallel with each other: one GPU, separate processes).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/device
mkdir -p "$RUNS" "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RUNS/gpu.txt" 2>&1

step() {  # name, command...
  local name=$1; shift
  local started=$SECONDS
  echo "== $name: $*" | tee -a "$RUNS/steps.log"
  timeout 560 "$@" > "$RUNS/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - started)) s" | tee -a "$RUNS/steps.log"
}

sdpa_pids=()
for name in "$@"; do
  case "$name" in
    standard) step standard python -m conformance run --tier standard --out "$RUNS/standard" ;;
    long) mapfile -t ids < <(python -c "
from conformance.catalog import cases
standard = {case.id for case in cases('standard')}
print('\n'.join(case.id for case in cases('full') if case.id not in standard))")
          step long python -m conformance run "${ids[@]/#/--case=}" --out "$RUNS/long" ;;
    mutants) step mutants python -m mutants --tier standard --max-kills 3 --out "$RUNS/mutants" ;;
    flake) step flake python -m conformance flake --tier standard --seeds 20 --out "$RUNS/flake" ;;
    sdpa-*) step "$name" python -m conformance run --tier standard --op flash_attention \
              --kernel "flash_attention=sdpa:${name#sdpa-}" --out "$RUNS/$name" & sdpa_pids+=($!) ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
for pid in "${sdpa_pids[@]}"; do wait "$pid"; done
tar czf "$OUT/runs.tgz" -C reports/runs device
cat "$RUNS/steps.log"
