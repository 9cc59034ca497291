"""Hunting mutants: run catalog cases against each until the harness kills it.

A mutant is *killed* when some case ends in a verdict that fails a run (fail,
nonfinite, error).  Tiers are climbed from the cheapest: smoke first, then
standard (then full) if the tier asked for allows and nothing killed it yet;
within a tier cases run in pairwise-coverage order (mutants.ordering) and the
hunt stops after `max_kills` killing cases (0: run the whole tier, list every kill).

Each mutant is hunted in a process of its own (mutants.hunters), its cases run in
that process; a hunt that lost its process to a case goes on with each case in an
isolated worker (`Progress.isolated`), where a crash or a hang is that case's `error`.
The result of one hunt is one line of mutants.jsonl: `kind` "mutant", `case`
"mutant.<name>", and a `verdict` of the sensitivity check itself --

    pass         killed (the harness caught the fault)
    fail         survived every case it was run on: a gap in the catalog or the rule
    unsupported  survived, and the fault cannot show on this backend (reason says why)
    error        the mutant could not be built (an edit no longer applies)
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

from conformance import backends
from conformance.cases.catalog import Case
from conformance.cases.tiers import cases, TIERS
from conformance.diagnosing.diagnosis import failing
from conformance.diagnosing.shrink_command import Shrinker
from conformance.judging import verdicts
from conformance.running.implementations import Implementations, reproduce_command
from conformance.running.isolation import IsolatedRunner, default_timeout_s
from conformance.running.runner import error_line, run_case
from conformance.running.worker import device_healthy
from conformance.usage import UsageError
from conformance.bundled.mutants.definitions import BY_NAME
from conformance.bundled.mutants.ordering import coverage_order
from conformance.bundled.mutants.registry import kernel_specs
from conformance.bundled.mutants.transform import PatternError, load

TIER_LADDER = ("smoke", "standard", "full")
KILLED, SURVIVED, BROKEN = "killed", "survived", "broken"


class DeviceLost(Exception):
    """A case left this process's device unusable (a CUDA fault poisons the context of the
    whole process): its own line stands, the hunt must go on in a fresh process."""


@dataclass
class Progress:
    """How far a hunt has come, so that another process can go on with it: the cases run
    (`done`), the kills found, the cases run per tier.  `isolated`: run each case in an
    isolated worker (conformance.running.isolation); `lost`: why the hunt's earlier process
    ended without a result (mutants.hunters), `first` the case it was running.
    `on_case(rung, case_id, kill)`, where set, is told of each case before it runs (kill
    None) and after (its kill record, or {})."""

    done: set = field(default_factory=set)
    kills: list = field(default_factory=list)
    cases_run: dict = field(default_factory=dict)
    isolated: bool = False
    lost: str = ""
    first: str | None = None  # the case to run first: the one the lost process was running
    case_timeout_s: float | None = None  # isolated cases' limit (None: conformance.running.isolation's)
    on_case: Callable | None = None

    def note(self, rung: str, case_id: str, kill: dict | None) -> None:
        if self.on_case is not None:
            self.on_case(rung, case_id, kill)

    def record(self, rung: str, case_id: str, kill: dict) -> None:
        """Case `case_id` of tier `rung` has run; `kill` its kill record, {} if it did not kill."""
        self.done.add(case_id)
        self.cases_run[rung] = self.cases_run.get(rung, 0) + 1
        if kill:
            self.kills.append(kill)


def tier_ladder(tier: str) -> list[str]:
    """The tiers a hunt climbs to reach `tier`: smoke first, the asked tier last."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; known tiers: {', '.join(TIERS)}")
    return list(TIER_LADDER[:TIER_LADDER.index(tier) + 1])


def hunt_order(tier: str, already_run: set[str], profile) -> list[Case]:
    """The tier's cases not yet run that `profile` supports (an unsupported case cannot
    kill), in pairwise-coverage order (see mutants.ordering)."""
    return coverage_order([case for case in cases(tier)
                           if case.id not in already_run and case.unsupported_reason(profile) is None])


def _kill_record(line: dict) -> dict:
    return {
        "case": line["case"],
        "verdict": line["verdict"],
        "reason": line["reason"],
        "tensors": [{"name": t["name"], "ratio": t["ratio"],
                     **({"pattern": t["where"]["pattern"], "evidence": t["where"]["evidence"]} if t.get("where") else {})}
                    for t in line.get("tensors", []) if failing(t)],
        "fault_pattern": line.get("fault_pattern"),
        "reproduce": line["reproduce"],
    }


def mutant_line(name: str, progress: Progress) -> dict:
    """The fields of mutant `name`'s mutants.jsonl line before its hunt is judged, with the
    kills and cases of `progress`."""
    mutant = BY_NAME[name]
    return {"kind": "mutant", "case": f"mutant.{name}", "mutant": name, "fault": mutant.fault,
            "files": list(mutant.files), "status": None, "verdict": None, "reason": "", "tier": None,
            "kills": progress.kills, "cases_run": progress.cases_run}


def hunt(name: str, tier: str, backend: str | None = None, max_kills: int = 1, shrink_s: float = 0,
         progress: Progress | None = None) -> dict:
    """Hunt mutant `name` up to `tier` on this process's backend; its mutants.jsonl line.
    shrink_s > 0: also shrink the first kill (conformance.diagnosing.shrinking) within that
    many seconds, into the line's `shrunk`. `progress`: where an earlier attempt stopped,
    and how to run and report cases (Progress). Activates the backend: call in a fresh
    process (mutants.hunters)."""
    progress = progress or Progress()
    profile = backends.activate(backend)
    # NaN/Inf cases make numpy warn inside the interpreter; the verdicts say what matters.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    mutant = BY_NAME[name]
    started = time.perf_counter()
    line = {**mutant_line(name, progress), "backend": profile.key, "tier_asked": tier}
    if progress.lost:
        line["isolated_after"] = progress.lost
    if mutant.backends is not None and profile.name not in mutant.backends:
        line.update(status=SURVIVED, verdict=verdicts.UNSUPPORTED,
                    reason=f"not reachable on {profile.name}: the edit builds only for {', '.join(mutant.backends)}")
        line["duration_s"] = round(time.perf_counter() - started, 2)
        return line
    try:
        load(mutant)
    except PatternError as exc:
        line.update(status=BROKEN, verdict=verdicts.ERROR, reason=str(exc))
    except Exception as exc:  # an edit that breaks the module itself (syntax, imports)
        line.update(status=BROKEN, verdict=verdicts.ERROR, reason=f"importing {mutant.package}: "
                                                                  f"{type(exc).__name__}: {exc}")
    else:
        _climb(line, mutant, profile, backend, tier, max_kills, progress)
        if shrink_s and line["kills"]:
            line["shrunk"] = _shrunk(line["kills"][0]["case"], mutant, profile, backend, shrink_s)
    line["duration_s"] = round(time.perf_counter() - started, 2)
    return line


def _climb(line: dict, mutant, profile, backend: str | None, tier: str, max_kills: int,
           progress: Progress) -> None:
    unreachable = mutant.interpreter_unreachable if profile.interpreted else None
    ladder = tier_ladder("smoke") if unreachable else tier_ladder(tier)
    run = _case_runner(mutant.name, profile, backend, progress)
    try:
        for rung in ladder:
            if not (max_kills and len(progress.kills) >= max_kills):
                _hunt_rung(rung, run, profile, max_kills, progress)
            if progress.kills:
                line.update(status=KILLED, verdict=verdicts.PASS, tier=rung)
                return
    finally:
        getattr(run, "close", lambda: None)()
    line["status"] = SURVIVED
    if unreachable:
        line.update(verdict=verdicts.UNSUPPORTED, reason=f"not reachable on the interpreter: {unreachable}")
    else:
        line.update(verdict=verdicts.FAIL, reason=f"survived every case up to the {ladder[-1]} tier")


def _hunt_rung(rung: str, run, profile, max_kills: int, progress: Progress) -> None:
    """Run `rung`'s cases not yet run until max_kills kills (0: all of them)."""
    progress.cases_run.setdefault(rung, 0)
    order = hunt_order(rung, progress.done, profile)
    order.sort(key=lambda case: case.id != progress.first)  # stable: the rest keep their order
    for case in order:
        progress.note(rung, case.id, None)
        result = run(case)
        kill = _kill_record(result) if result["verdict"] in verdicts.FAILING else {}
        progress.record(rung, case.id, kill)
        progress.note(rung, case.id, kill)
        if result["verdict"] == verdicts.ERROR and not progress.isolated and not device_healthy(profile.device):
            raise DeviceLost(f"the device stopped working after {case.id}")
        if max_kills and len(progress.kills) >= max_kills:
            return


class _IsolatedCases:
    """Runs a mutant's cases in an isolated worker: a case that crashes or hangs it is an
    `error` line (worker crashed, timeout), as in `conformance run --isolate`."""

    def __init__(self, mutant_name: str, profile, backend: str | None, timeout_s: float | None):
        specs = kernel_specs(mutant_name)
        self.profile, self.backend = profile, backend
        self.implementations = Implementations.from_specs(specs)
        config = {"backend": profile.key, "backend_option": backend, "kernels": specs}
        timeout_s = timeout_s or default_timeout_s(profile.device)
        self.runner = IsolatedRunner(config, timeout_s, self._error_line)

    def _error_line(self, case: Case, reason: str, traceback: str = "") -> dict:
        return error_line(case, self.profile.key, self.implementations.name(case.op),
                          reproduce_command(case.id, self.backend, self.implementations), reason, traceback)

    def __call__(self, case: Case) -> dict:
        return self.runner.run(case)

    def close(self) -> None:
        self.runner.close()


def _case_runner(mutant_name: str, profile, backend: str | None, progress: Progress):
    """case -> results line: in this process, or (progress.isolated) in a worker of its own."""
    if progress.isolated:
        return _IsolatedCases(mutant_name, profile, backend, progress.case_timeout_s)
    implementations = Implementations.from_specs(kernel_specs(mutant_name))
    return lambda case: run_case(case, profile, implementations, backend_option=backend)


def _shrunk(case_id: str, mutant, profile, backend: str | None, budget_s: float) -> dict:
    """The smallest case that still kills the mutant, searched from its first kill."""
    shrinker = Shrinker(profile, Implementations.from_specs(kernel_specs(mutant.name)), backend)
    try:
        return shrinker.shrink(Case.from_id(case_id), budget_s)
    except UsageError as exc:  # the kill did not repeat (a race): nothing to shrink
        return {"from": case_id, "note": str(exc)}


def exit_status(lines: list[dict]) -> int:
    """0 iff every mutant was killed or cannot show its fault on this backend."""
    return 0 if all(line["verdict"] in (verdicts.PASS, verdicts.UNSUPPORTED) for line in lines) else 1

