#!/usr/bin/env bash
# The device steps of issues 32 and 33, one after the other, each a run folder under
# reports/runs/variants/, packed into $OUT/variants.tgz with the logs after every step.
#
#   FA_HARNESS_REVISION=<commit> bash scripts/variants_session.sh STEP...
#
#   standard         the standard tier (with the attention variants' cases), then `diff` against the
#                    published H100 standard run: the old cases must not change after the launch
#                    tables were split per target family
#   long-variants    the full tier's long variant cases (windows at 8k/16k, softcap, ALiBi, varlen 8x8k)
#   compile-full     the compile-only tier, full scope, for the nine targets of issue 32 (CPU only)
#   flex-variants    the standard tier's variant cases judged on FlexAttention (dense and varlen)
#   mutants-variants the kill table of the variants' mutants, from the standard tier
#   benchmark        the variants benchmark (benchmarks/variants_benchmark.py), alone on the GPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/variants
mkdir -p "$RUNS" "$OUT"

source scripts/steps.sh  # step / packed_step NAME COMMAND..., pack_runs
STEP_TIMEOUT=${STEP_TIMEOUT:-500}
TARGETS=sm_80,sm_90,sm_100,sm_120,gfx90a,gfx942,gfx950,gfx1100,gfx1201

variant_cases() {  # TIER [long]: --case=ID for each case of TIER using a variant (long: not in standard)
  python -c "
import sys
from conformance.cases.tiers import cases
standard = {case.id for case in cases('standard')} if sys.argv[2:] == ['long'] else set()
def variant(case):
    return case.op == 'flash_attention_varlen' or case.window or case.softcap or case.alibi
print('\n'.join('--case=' + case.id for case in cases(sys.argv[1]) if variant(case) and case.id not in standard))
" "$@"
}

for name in "$@"; do
  case "$name" in
    standard) packed_step "$name" python -m conformance run --tier standard --out "$RUNS/$name"
              step diff-standard python -m conformance diff reports/h100-sm90/standard "$RUNS/$name" ;;
    long-variants) mapfile -t ids < <(variant_cases full long)
                   packed_step "$name" python -m conformance run "${ids[@]}" --out "$RUNS/$name" ;;
    compile-full) packed_step "$name" python -m conformance compile --scope full -n 16 --target "$TARGETS" \
                    --out "$RUNS/$name" ;;
    flex-variants) mapfile -t ids < <(variant_cases standard)
                   packed_step "$name" python -m conformance run "${ids[@]}" --kernel flash_attention=flex \
                     --kernel flash_attention_varlen=flex --out "$RUNS/$name" ;;
    mutants-variants) mapfile -t names < <(python -m mutants --list | awk '/window|softcap|alibi|varlen/ {print "--mutant=" $1}')
                      packed_step "$name" python -m mutants --tier standard "${names[@]}" --max-kills 3 --out "$RUNS/$name" ;;
    benchmark) packed_step "$name" python benchmarks/variants_benchmark.py --out "$RUNS/$name" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
pack_runs
cat "$RUNS/steps.log"
