#!/usr/bin/env bash
# One device call of a session: the named steps, each a run folder under reports/runs/device/,
# all of them packed into $OUT/runs.tgz with their logs (the device returns at most 8 files).
#
#   FA_HARNESS_REVISION=<commit> bash scripts/device_session.sh STEP...
#
# Steps: standard | mutants | long | flake | sdpa-flash | sdpa-cudnn | sdpa-efficient | sdpa-math |
#        diagnose | flash-gqa-seeds | flake-SPEC (the standard flake set under --distribution SPEC) |
#        scaled-S (the standard tier under --distribution scaled:S) |
#        shards (the standard tier as 2 shards, one after the other, merged and diffed against
#                the `standard` step's folder of an earlier call, which must be carried along) |
#        flex (scripts/flex_standard.sh: the standard tier's flash cases against FlexAttention;
#              resumes the run folder of an earlier call if it is carried along) |
#        flex-known (the flex cases that met its known issues flex-*, run again under them) |
#        mutants-smoke (the kill table from the smoke tier, localized, kills shrunk 30 s each)
# `shards` runs alone first; the steps after it in the list start when it is done.
# All steps run at once, as separate processes on the one GPU: verdicts do not depend on timing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/device
mkdir -p "$RUNS/flake-scales" "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$RUNS/gpu.txt" 2>&1

source scripts/steps.sh  # step NAME COMMAND...

pids=()
for name in "$@"; do
  case "$name" in
    standard) step standard python -m conformance run --tier standard --out "$RUNS/standard" & pids+=($!) ;;
    long) mapfile -t ids < <(python -c "
from conformance.cases.tiers import cases
standard = {case.id for case in cases('standard')}
print('\n'.join(case.id for case in cases('full') if case.id not in standard))")
          step long python -m conformance run "${ids[@]/#/--case=}" --out "$RUNS/long" & pids+=($!) ;;
    mutants) step mutants python -m mutants --tier standard --max-kills 3 --shrink 60 --out "$RUNS/mutants" & pids+=($!) ;;
    shards) ( for k in 1 2; do
                step "shard-$k-of-2" python -m conformance run --tier standard --shard "$k/2" --out "$RUNS/shards/shard-$k"
              done
              step shards-merged python -m conformance report "$RUNS/shards" --out "$RUNS/shards-merged"
              step shards-diff python -m conformance diff "$RUNS/standard" "$RUNS/shards-merged" )
            ;;  # alone: the shards' wall times are the balance
    flex) step flex bash scripts/flex_standard.sh "$RUNS/peers" & pids+=($!) ;;
    flex-known) step flex-known python -m conformance run --kernel flash_attention=flex --out "$RUNS/peers/flex-known" \
              --case 'flash_attention.fwd[fp16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' \
              --case 'flash_attention.bwd[fp16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' \
              --case 'flash_attention.fwd[bf16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' \
              --case 'flash_attention.bwd[bf16,d64,causal,B2,H8,Hkv2,Sq64,Sk1,seed0]' \
              --case 'flash_attention.fwd[fp16,d16,noncausal,B35,H2048,Hkv2048,Sq16,Sk16,seed0]' \
              --case 'flash_attention.bwd[fp16,d16,noncausal,B35,H2048,Hkv2048,Sq16,Sk16,seed0]' & pids+=($!) ;;
    mutants-smoke) step mutants-smoke python -m mutants --tier smoke --max-kills 3 --shrink 30 \
              --out "$RUNS/mutants-smoke" & pids+=($!) ;;
    flake) step flake python -m conformance flake --tier standard --seeds 20 --out "$RUNS/flake" & pids+=($!) ;;
    flake-*) spec=${name#flake-}; step "$name" python -m conformance flake --tier standard --seeds 20 \
              --distributions "$spec" --out "$RUNS/flake-scales" & pids+=($!) ;;
    scaled-*) spec=${name#scaled-}; step "standard-scaled-$spec" python -m conformance run --tier standard \
              --distribution "scaled:$spec" --out "$RUNS/standard-scaled-$spec" & pids+=($!) ;;
    diagnose) step diagnose env PYTHONPATH=. python reports/h100-sm90/peers/diagnose_sdpa.py & pids+=($!) ;;
    flash-gqa-seeds) step flash-gqa-seeds python -m conformance run --seeds 10 --kernel flash_attention=sdpa:flash \
              --case 'flash_attention.bwd[fp16,d128,causal,B1,H8,Hkv2,Sq509,Sk1024,seed0]' \
              --case 'flash_attention.bwd[fp16,d128,causal,B1,H8,Hkv8,Sq509,Sk1024,seed0]' \
              --out "$RUNS/flash-gqa-seeds" & pids+=($!) ;;
    sdpa-*) step "$name" python -m conformance run --tier standard --op flash_attention \
              --kernel "flash_attention=sdpa:${name#sdpa-}" --out "$RUNS/$name" & pids+=($!) ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
for pid in "${pids[@]}"; do wait "$pid"; done
if [ -d "$RUNS/flake-scales" ] && ls "$RUNS"/flake-scales/*/results.jsonl >/dev/null 2>&1; then
  python -m conformance flake --render "$RUNS/flake-scales" > "$RUNS/flake-scales.log" 2>&1
fi
tar czf "$OUT/runs.tgz" -C reports/runs device
cat "$RUNS/steps.log"
