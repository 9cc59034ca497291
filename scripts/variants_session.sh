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
#   standard-variants the standard tier's variant cases only (a check of a kernel or table change)
#   tune-window      launch-configuration sweeps of the windowed forward (left 1024, bf16, D 64/128,
#                    S 8192; TUNE_KERNELS="fwd bwd_dkdv bwd_dq" adds the backward's): what the "window"
#                    variant tables take (kernels/tables_nvidia.py)
#   tune-varlen      the same for the varlen forward (the benchmark's packed batch)
#   hardware-tanh    the softcap_hardware_tanh mutant (the approximate tanh FlashAttention-2/3 take): its
#                    kill table from the standard tier, then the benchmark's softcap cells on its kernels
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
    standard-variants) mapfile -t ids < <(variant_cases standard)
                       packed_step "$name" python -m conformance run "${ids[@]}" --out "$RUNS/$name" ;;
    tune-window) mkdir -p "$RUNS/$name"
                 for kernel in ${TUNE_KERNELS:-fwd}; do
                   packed_step "$name-$kernel" python benchmarks/tune_launch.py --kernel "$kernel" --window 1024 \
                     --head-dims 64,128 --dtype bf16 --stages 2,3 --out "$RUNS/$name/$kernel.jsonl"
                 done ;;
    tune-varlen) mkdir -p "$RUNS/$name"
                 packed_step "$name" python benchmarks/tune_launch.py --kernel fwd --varlen --head-dims 64,128 \
                   --dtype bf16 --stages 2,3 --out "$RUNS/$name/fwd.jsonl" ;;
    hardware-tanh) packed_step "$name-mutant" python -m mutants --tier standard --mutant=softcap_hardware_tanh \
                     --max-kills 3 --out "$RUNS/$name-mutant"
                   packed_step "$name-benchmark" python benchmarks/variants_benchmark.py --variants softcap \
                     --mutant softcap_hardware_tanh --flex-seq-lens none --seq-lens 8192 --out "$RUNS/$name-benchmark" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
pack_runs
cat "$RUNS/steps.log"
