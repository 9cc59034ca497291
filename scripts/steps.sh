# Sourced by the device session scripts: `step NAME COMMAND...` runs one step of a session.
# COMMAND runs under `timeout $STEP_TIMEOUT` (default 560 s), its output in $RUNS/NAME.log; a line
# before and after it (the exit code and seconds) goes to the terminal and $RUNS/steps.log.
# Variables assigned in front of `step` (FA_TRITON_CACHE=... step ...) reach COMMAND.
step() {
  local name=$1; shift
  local started=$SECONDS
  echo "== $name: $*" | tee -a "$RUNS/steps.log"
  timeout "${STEP_TIMEOUT:-560}" "$@" > "$RUNS/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - started)) s" | tee -a "$RUNS/steps.log"
}

# `packed_step NAME COMMAND...`: a step, then $RUNS packed into $OUT/<its folder name>.tgz, so a
# device call cut off later still brings back every run folder finished so far.
pack_runs() { tar czf "$OUT/$(basename "$RUNS").tgz" -C "$(dirname "$RUNS")" "$(basename "$RUNS")"; }
packed_step() {
  step "$@"
  pack_runs
}
