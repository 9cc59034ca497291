"""`python -m conformance shrink CASE_ID`: the smallest case that still fails, and its reproducer.

Exit 0 with the smallest failing case printed; exit 2 with one line for an unknown or
malformed id, or a case that does not fail here (nothing to shrink).
"""

from __future__ import annotations

from conformance import usage
from conformance.cases.catalog import Case
from conformance.judging import verdicts

DEFAULT_BUDGET_S = 300.0


def add_parser(commands) -> None:
    shrink = commands.add_parser("shrink", help="find the smallest case that still fails like CASE_ID")
    shrink.add_argument("case_id", metavar="CASE_ID", help="a failing case's id, e.g. from a report")
    shrink.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    shrink.add_argument("--kernel", action="append", default=[], metavar="OP=MOD:FN",
                        help="the implementation the case failed with (as given to run)")
    shrink.add_argument("--capabilities", metavar="FILE", help="as given to run")
    shrink.add_argument("--dropout-mask", action="append", default=[], metavar="[OP=]MOD:FN", help="as given to run")
    shrink.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, metavar="S",
                        help=f"seconds the search may take (default {DEFAULT_BUDGET_S:g}); the best case so far after")


def parse_case(text: str) -> Case:
    try:
        return Case.from_id(text)
    except ValueError as exc:
        raise usage.UsageError(f"argument CASE_ID: {exc}") from None


class Shrinker:
    """A profile and implementations to judge candidates with, in this process."""

    def __init__(self, profile, implementations, backend_option: str | None = None):
        self.profile, self.implementations, self.backend = profile, implementations, backend_option

    @classmethod
    def from_options(cls, backend: str | None, kernels=(), capabilities=None, dropout_masks=()) -> "Shrinker":
        """From the options a run was given (activates the backend); UsageError naming a bad one."""
        from conformance.running.implementations import Implementations

        profile = usage.backend_profile(backend, activate=True)
        try:
            implementations = Implementations.from_specs(list(kernels), capabilities, list(dropout_masks))
        except ValueError as exc:
            raise usage.UsageError(str(exc)) from None
        return cls(profile, implementations, backend)

    def rule_verdict(self, case: Case) -> str:
        from conformance.running.runner import run_case

        return run_case(case, self.profile, self.implementations, backend_option=self.backend)["rule_verdict"]

    def supported(self, case: Case) -> bool:
        return case.unsupported_reason(self.profile) is None

    def shrink(self, case: Case, budget_s: float) -> dict:
        """{case, tried, seconds, complete, reproduce} of the smallest failing case;
        UsageError when `case` does not fail."""
        from conformance.diagnosing.shrinking import shrink
        from conformance.running.implementations import reproduce_command

        original = self.rule_verdict(case)
        if original not in (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR):
            raise usage.UsageError(f"argument CASE_ID: {case.id} does not fail here ({original}): nothing to shrink")
        found = shrink(case, self.rule_verdict, self.supported, budget_s, original)
        return {"case": found.case.id, "from": case.id, "tried": found.tried, "seconds": round(found.seconds, 1),
                "complete": found.complete,
                "reproduce": reproduce_command(found.case.id, self.backend, self.implementations, [])}


def command_shrink(args) -> int:
    case = parse_case(args.case_id)
    shrinker = Shrinker.from_options(args.backend, args.kernel, args.capabilities, args.dropout_mask)
    found = shrinker.shrink(case, args.budget)
    budget_note = "" if found["complete"] else f" (budget of {args.budget:g} s spent: the smallest found so far)"
    print(f"smallest failing case{budget_note}: {found['case']}")
    print(f"  {found['tried']} smaller cases tried in {found['seconds']:.0f} s, from {found['from']}")
    print(f"reproduce: {found['reproduce']}")
    return usage.EXIT_OK


SHRUNK_FILE = "shrunk.jsonl"


def shrink_run(run_dir, budget_s: float) -> int:
    """`report DIR --shrink`: shrink every failing case of a run folder with the run's own
    backend and implementations, into DIR/shrunk.jsonl (rewritten); how many were shrunk."""
    import json
    from pathlib import Path

    from conformance.running.results import read_env, read_results

    selection = read_env(run_dir).get("selection") or {}
    failing = [line for line in read_results(run_dir)
               if line.get("kind", "case") == "case" and line.get("rule_verdict") in
               (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR)]
    if not failing:
        return 0
    shrinker = Shrinker.from_options(selection.get("backend"), selection.get("kernels") or (),
                                     selection.get("capabilities"), selection.get("dropout_masks") or ())
    with open(Path(run_dir) / SHRUNK_FILE, "w", encoding="utf-8") as out:
        for number, line in enumerate(failing, 1):
            print(f"conformance shrink: {number}/{len(failing)} {line['case']}", flush=True)
            try:
                found = shrinker.shrink(parse_case(line["case"]), budget_s)
            except usage.UsageError as exc:  # it no longer fails here (a flaky or fixed case)
                found = {"from": line["case"], "note": str(exc)}
            out.write(json.dumps(found) + "\n")
            out.flush()
    return len(failing)


def attach_shrunk(run_dir, lines: list[dict]) -> list[dict]:
    """The lines with `shrunk` ({case, tried, seconds, reproduce}) from DIR/shrunk.jsonl, if any."""
    import json
    from pathlib import Path

    path = Path(run_dir) / SHRUNK_FILE
    if not path.exists():
        return lines
    found = {}
    for text in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(text)
        if "case" in record:
            found[record["from"]] = record
    return [{**line, "shrunk": found[line["case"]]} if line.get("case") in found else line for line in lines]


COMMANDS = {"shrink": command_shrink}
