#!/usr/bin/env bash
# The device steps of issue 34 (KV-cache decoding), one after the other, each a run folder
# under reports/runs/kv-cache/, packed into $OUT/kv-cache.tgz with the logs after every step.
#
#   FA_HARNESS_REVISION=<commit> bash scripts/kv_cache_session.sh STEP...
#
# FlagAttention's operators are imported from FLAG_ATTENTION (default .peers/FlagAttention/src):
# a snapshot of FlagOpen/FlagAttention brought next to the checkout, ignored by git
# (.git/info/exclude) and carried to the device (the device has no network), e.g. from a
# fetched mirror:  echo /.peers/ >> .git/info/exclude; mkdir -p .peers/FlagAttention &&
#   git --git-dir MIRROR archive HEAD src | tar -x -C .peers/FlagAttention   (then carry .peers)
#
#   standard        the standard tier, then `diff` against the published H100 standard run: the
#                   cases before KV-cache decoding must not change
#   standard-kv     the standard tier's KV-cache cases alone (after a change to the decode kernels)
#   long-kv         the full tier's KV-cache cases beyond standard (caches of 64k and 128k keys)
#   nonempty        the standard tier's lens=nonempty cases alone (added after the first H100 run)
#   flex-kv         the standard tier's KV-cache cases judged on FlexAttention (contiguous caches)
#   flag-paged      ... on FlagAttention's paged_attention (recipes/flag-attention/paged_attention.toml)
#   flag-split-kv   ... on FlagAttention's flash_attention_split_kv (recipes/flag-attention/split_kv.toml)
#   mutants-kv      the kill table of the kv_cache mutants, from the standard tier
#   benchmark       the decoding benchmark (benchmarks/decode_benchmark.py), alone on the GPU, for at most
#                   BENCH_BUDGET seconds (default 400); run it again on the same folder to go on;
#                   BENCH_ARGS adds options (e.g. --dtypes bf16)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
RUNS=reports/runs/kv-cache
FLAG_ATTENTION=${FLAG_ATTENTION:-.peers/FlagAttention/src}
mkdir -p "$RUNS" "$OUT"

source scripts/steps.sh  # step / packed_step NAME COMMAND..., pack_runs
STEP_TIMEOUT=${STEP_TIMEOUT:-500}
KV=(--op kv_cache_attention)

long_kv_cases() {  # --case=ID for each KV-cache case of the full tier that standard lacks
  python -c "
from conformance.cases.tiers import cases
standard = {case.id for case in cases('standard')}
print('\n'.join('--case=' + c.id for c in cases('full') if c.op == 'kv_cache_attention' and c.id not in standard))"
}

nonempty_cases() {  # --case=ID for each standard case whose caches are never empty
  python -c "
from conformance.cases.tiers import cases
print('\\n'.join('--case=' + c.id for c in cases('standard') if c.lens == 'nonempty'))"
}

for name in "$@"; do
  case "$name" in
    standard) packed_step "$name" python -m conformance run --tier standard --out "$RUNS/$name"
              step diff-standard python -m conformance diff reports/h100-sm90/standard "$RUNS/$name" ;;
    long-kv) mapfile -t ids < <(long_kv_cases)
             packed_step "$name" python -m conformance run "${ids[@]}" --out "$RUNS/$name" ;;
    standard-kv) packed_step "$name" python -m conformance run --tier standard "${KV[@]}" --out "$RUNS/$name" ;;
    nonempty) mapfile -t ids < <(nonempty_cases)
              packed_step "$name" python -m conformance run "${ids[@]}" --out "$RUNS/$name" ;;
    flex-kv) packed_step "$name" python -m conformance run --tier standard "${KV[@]}" \
               --kernel kv_cache_attention=flex --out "$RUNS/$name" ;;
    flag-paged) PYTHONPATH="$FLAG_ATTENTION${PYTHONPATH:+:$PYTHONPATH}" packed_step "$name" \
                  python -m conformance run --tier standard "${KV[@]}" --kernel kv_cache_attention=flag_attn:paged_attention \
                  --capabilities recipes/flag-attention/paged_attention.toml --out "$RUNS/$name" ;;
    flag-split-kv) PYTHONPATH="$FLAG_ATTENTION${PYTHONPATH:+:$PYTHONPATH}" packed_step "$name" \
                     python -m conformance run --tier standard "${KV[@]}" \
                     --kernel kv_cache_attention=flag_attn:flash_attention_split_kv \
                     --capabilities recipes/flag-attention/split_kv.toml --out "$RUNS/$name" ;;
    mutants-kv) mapfile -t names < <(python -m mutants --list | awk '/^kv_cache_/ {print "--mutant=" $1}')
                packed_step "$name" python -m mutants --tier standard "${names[@]}" --max-kills 3 --out "$RUNS/$name" ;;
    benchmark) packed_step "$name" python benchmarks/decode_benchmark.py --flag-attention "$FLAG_ATTENTION" --budget "${BENCH_BUDGET:-400}" \
                 ${BENCH_ARGS:-} --out "$RUNS/$name" ;;
    *) echo "unknown step $name" | tee -a "$RUNS/steps.log" ;;
  esac
done
pack_runs
cat "$RUNS/steps.log"
