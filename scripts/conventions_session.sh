#!/usr/bin/env bash
# The device steps of issue 30's numerical conventions, one after the other, each a run folder
# under reports/runs/conventions/, packed into $OUT/conventions.tgz with the logs.
#
#   FA_HARNESS_REVISION=<commit> bash scripts/conventions_session.sh STEP...
#
#   sdpa-top-left   the standard tier's flash_attention cases against sdpa:flash_is_causal (torch's
#                   own is_causal, top-left, declared): every causal Sq != Sk case judged
#   sdpa-B-top-left the same with sdpa:B_is_causal (B: cudnn, efficient, math)
#   new-standard    the standard tier's piecewise_attention cases under a value distribution
#   mutant-piecewise  the kill table of piecewise_running_max_starts_at_zero from the standard tier
#   lse-declared    the standard tier's flash_attention cases that return lse, against the bundled
#                   Triton kernel writing +inf lse on rows that see no key, declared "+inf"
#   lse-undeclared  the same kernel, undeclared: must fail on exactly the cases with such rows
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/conventions
mkdir -p "$RUNS" "$OUT"

source scripts/steps.sh  # step / packed_step NAME COMMAND..., pack_runs
STEP_TIMEOUT=500

lse_cases() {
  python -c "
from conformance.cases.tiers import cases
print('\n'.join('--case=' + case.id for case in cases('standard') if case.op == 'flash_attention' and case.lse))"
}

for name in "$@"; do
  case "$name" in
    sdpa-top-left) packed_step "$name" python -m conformance run --tier standard --op flash_attention \
                     --kernel flash_attention=sdpa:flash_is_causal --out "$RUNS/$name" ;;
    sdpa-*-top-left) backend=${name#sdpa-}; backend=${backend%-top-left}
                     packed_step "$name" python -m conformance run --tier standard --op flash_attention \
                       --kernel "flash_attention=sdpa:${backend}_is_causal" --out "$RUNS/$name" ;;
    new-standard) mapfile -t ids < <(python -c "
from conformance.cases.tiers import cases
print('\n'.join('--case=' + case.id for case in cases('standard') if case.op == 'piecewise_attention' and case.values))")
                  packed_step "$name" python -m conformance run "${ids[@]}" --out "$RUNS/$name" ;;
    mutant-piecewise) packed_step "$name" python -m mutants --tier standard --mutant piecewise_running_max_starts_at_zero \
                        --max-kills 3 --out "$RUNS/$name" ;;
    lse-declared) mapfile -t ids < <(lse_cases)
                  packed_step "$name" python -m conformance run "${ids[@]}" \
                    --kernel flash_attention=tests.convention_doubles:bundled_lse_plus_inf --out "$RUNS/$name" ;;
    lse-undeclared) mapfile -t ids < <(lse_cases)
                    packed_step "$name" python -m conformance run "${ids[@]}" \
                      --kernel flash_attention=tests.convention_doubles:bundled_lse_plus_inf_undeclared --out "$RUNS/$name" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
pack_runs
cat "$RUNS/steps.log"
