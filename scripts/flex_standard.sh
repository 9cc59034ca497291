#!/usr/bin/env bash
# The standard tier's flash_attention cases judged against torch's FlexAttention, compiled
# (--kernel flash_attention=flex, conformance/peers/flex.py), on the CUDA GPU of this machine.
#
#   FA_HARNESS_REVISION=<commit> bash scripts/flex_standard.sh OUT_DIR
#
# Writes the run folder OUT_DIR/flex (results.jsonl, env.json, summary.md, report.html,
# junit.xml, run.log) -- what is committed as reports/h100-sm90/peers/flex/ -- and packs it
# into OUT_DIR/flex.tgz (a device call returns a few files only).
#
# Every case compiles its own kernels (one static compilation per shape, ~580 cases), which is
# CPU work: FLEX_WORKERS xdist workers share the one GPU (default 12 on 16 cores), each with one
# Inductor compile thread so they do not oversubscribe the cores. A device call is limited in
# time: the run stops after FLEX_LIMIT_S (default 540) seconds, and calling the script again with
# the same OUT_DIR (its folder carried along) resumes it: recorded cases are kept, the rest run.
# The exit status is the run's (0 all pass/unsupported, 1 a case fails/errs or did not finish).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: bash scripts/flex_standard.sh OUT_DIR}
RUN=$OUT_DIR/flex
mkdir -p "$OUT_DIR"
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}

if [ -f "$RUN/results.jsonl" ]; then
  selection=(--resume "$RUN")
else  # this GPU's profile by name, so that a torch that sees no GPU is an error, not a CPU run
  arch=$(python -c "import torch; print('sm_%d%d' % torch.cuda.get_device_capability())") || exit 2
  selection=(--tier standard --op flash_attention --kernel flash_attention=flex --backend "cuda:$arch" --out "$RUN")
fi
started=$SECONDS
timeout "${FLEX_LIMIT_S:-540}" python -m conformance run "${selection[@]}" -n "${FLEX_WORKERS:-12}" \
  >> "$OUT_DIR/flex.log" 2>&1
status=$?
echo "flex standard: exit $status after $((SECONDS - started)) s" | tee -a "$OUT_DIR/flex.log"
python -m conformance report "$RUN" > /dev/null 2>&1  # the report files, also after a cut-short run
cp "$OUT_DIR/flex.log" "$RUN/run.log"
tar czf "$OUT_DIR/flex.tgz" -C "$OUT_DIR" flex
python - "$RUN" <<'PY'
import collections, json, pathlib, sys
lines = [json.loads(t) for t in (pathlib.Path(sys.argv[1]) / "results.jsonl").read_text().splitlines()]
cases = [l for l in lines if l.get("kind", "case") == "case"]
print(len(cases), "cases", dict(collections.Counter(l["verdict"] for l in cases)),
      "compile", round(sum(l.get("compile_s") or 0 for l in cases)), "s in",
      sum(l.get("compilations") or 0 for l in cases), "compilations; case time",
      round(sum(l.get("duration_s") or 0 for l in cases)), "s")
PY
exit $status
