"""Hunting mutants: run catalog cases against each until the harness kills it.

A mutant is *killed* when some case ends in a verdict that fails a run (fail,
nonfinite, error).  Tiers are climbed from the cheapest: smoke first, then
standard (then full) if the tier asked for allows and nothing killed it yet;
within a tier cases run in pairwise-coverage order (mutants.ordering) and the
hunt stops after `max_kills` killing cases (0: run the whole tier, list every kill).

Each mutant is hunted in its own worker process (spawned: the backend is
activated before any kernel is imported, and a CUDA context is never forked).
The result of one hunt is one line of mutants.jsonl: `kind` "mutant", `case`
"mutant.<name>", and a `verdict` of the sensitivity check itself --

    pass         killed (the harness caught the fault)
    fail         survived every case it was run on: a gap in the catalog or the rule
    unsupported  survived, and the fault cannot show on this backend (reason says why)
    error        the mutant could not be built (an edit no longer applies)
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed

from conformance import backends
from conformance.cases.catalog import Case
from conformance.cases.tiers import cases, TIERS
from conformance.diagnosing.diagnosis import failing
from conformance.diagnosing.shrink_command import Shrinker
from conformance.judging import verdicts
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case
from conformance.usage import UsageError
from conformance.bundled.mutants.definitions import BY_NAME
from conformance.bundled.mutants.ordering import coverage_order
from conformance.bundled.mutants.registry import kernel_specs
from conformance.bundled.mutants.transform import PatternError, load

TIER_LADDER = ("smoke", "standard", "full")
KILLED, SURVIVED, BROKEN = "killed", "survived", "broken"


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


def hunt(name: str, tier: str, backend: str | None = None, max_kills: int = 1, shrink_s: float = 0) -> dict:
    """Hunt mutant `name` up to `tier` on this process's backend; its mutants.jsonl line.
    shrink_s > 0: also shrink the first kill (conformance.diagnosing.shrinking) within that
    many seconds, into the line's `shrunk`. Activates the backend: call in a fresh process
    (see hunt_all)."""
    profile = backends.activate(backend)
    # NaN/Inf cases make numpy warn inside the interpreter; the verdicts say what matters.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
    mutant = BY_NAME[name]
    started = time.perf_counter()
    line = {"kind": "mutant", "case": f"mutant.{name}", "mutant": name, "fault": mutant.fault,
            "files": list(mutant.files), "backend": profile.key, "tier_asked": tier,
            "status": None, "verdict": None, "reason": "", "tier": None, "kills": [], "cases_run": {}}
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
        _climb(line, mutant, profile, backend, tier, max_kills)
        if shrink_s and line["kills"]:
            line["shrunk"] = _shrunk(line["kills"][0]["case"], mutant, profile, backend, shrink_s)
    line["duration_s"] = round(time.perf_counter() - started, 2)
    return line


def _climb(line: dict, mutant, profile, backend: str | None, tier: str, max_kills: int) -> None:
    implementations = Implementations.from_specs(kernel_specs(mutant.name))
    unreachable = mutant.interpreter_unreachable if profile.interpreted else None
    ladder = tier_ladder("smoke") if unreachable else tier_ladder(tier)
    done: set[str] = set()
    for rung in ladder:
        ran = 0
        for case in hunt_order(rung, done, profile):
            result = run_case(case, profile, implementations, backend_option=backend)
            done.add(case.id)
            ran += 1
            if result["verdict"] in verdicts.FAILING:
                line["kills"].append(_kill_record(result))
                if max_kills and len(line["kills"]) >= max_kills:
                    break
        line["cases_run"][rung] = ran
        if line["kills"]:
            line.update(status=KILLED, verdict=verdicts.PASS, tier=rung)
            return
    line["status"] = SURVIVED
    if unreachable:
        line.update(verdict=verdicts.UNSUPPORTED, reason=f"not reachable on the interpreter: {unreachable}")
    else:
        line.update(verdict=verdicts.FAIL, reason=f"survived every case up to the {ladder[-1]} tier")


def _shrunk(case_id: str, mutant, profile, backend: str | None, budget_s: float) -> dict:
    """The smallest case that still kills the mutant, searched from its first kill."""
    shrinker = Shrinker(profile, Implementations.from_specs(kernel_specs(mutant.name)), backend)
    try:
        return shrinker.shrink(Case.from_id(case_id), budget_s)
    except UsageError as exc:  # the kill did not repeat (a race): nothing to shrink
        return {"from": case_id, "note": str(exc)}


def hunt_all(names: list[str], tier: str, backend: str | None = None, max_kills: int = 1,
             jobs: int = 1, on_result=None, shrink_s: float = 0) -> list[dict]:
    """Hunt every mutant in `names`, `jobs` at a time in spawned processes; lines in
    `names` order.  `on_result(line)` is called as each hunt finishes."""
    context = multiprocessing.get_context("spawn")
    lines = {}
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(names))), mp_context=context) as pool:
        futures = {pool.submit(hunt, name, tier, backend, max_kills, shrink_s): name
                   for name in _longest_first(names, backend)}
        for future in as_completed(futures):
            line = lines[futures[future]] = future.result()
            if on_result is not None:
                on_result(line)
    return [lines[name] for name in names]


def _longest_first(names: list[str], backend: str | None) -> list[str]:
    """Submission order: hunts expected to run a whole tier (faults the interpreter
    cannot show) first, so they overlap with the many short ones."""
    interpreted = (backends.profile_by_key(backend) if backend else backends.detect()).interpreted
    return sorted(names, key=lambda name: not (interpreted and BY_NAME[name].interpreter_unreachable))


def exit_status(lines: list[dict]) -> int:
    """0 iff every mutant was killed or cannot show its fault on this backend."""
    return 0 if all(line["verdict"] in (verdicts.PASS, verdicts.UNSUPPORTED) for line in lines) else 1

