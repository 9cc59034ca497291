"""`python -m conformance diff OLD NEW`: what changed between two runs, by line id.

Ids are stable across runs, machines and versions, so any two run folders can
be compared. Every kind of line (case, probe, compile) takes part. A line id in
both runs is classified by its verdicts, with FAILING = fail, nonfinite, error,
xpass (the verdicts that fail a run):

    regression  OLD's verdict does not fail a run, NEW's does (pass -> fail,
                xfail -> xpass, unsupported -> error, ...)
    fixed       OLD's verdict fails a run, NEW's does not
    changed     any other change of verdict (pass -> unsupported, fail -> error, ...)
    drift       same verdict, but some tensor's ratio moved by more than the
                threshold: |new - old| > drift, in ratio units; for a compile
                check, a resource (registers, spilled bytes, shared memory)
                changed by more than that fraction: |new - old| / old > drift

and ids in one run only are `new` or `removed`. Drift is absolute because a
ratio is already relative (the kernel's error in units of the torch path's
error, bound 2): 0.25 means a quarter of the torch path's error, the same
weight for every tensor; a relative threshold would flag 0.01 -> 0.02. A ratio
that turns inf/NaN (or back) always drifts.

The command exits 1 iff there is a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conformance.judging.verdicts import FAILING
from conformance.reporting import markdown, summary, terminal

DEFAULT_DRIFT = 0.25
# Resources of a compile check whose relative change beyond the threshold is drift.
COMPILE_RESOURCES = ("registers", "spills_bytes", "shared_bytes")
REGRESSION, FIXED, CHANGED, DRIFT, NEW, REMOVED = "regression", "fixed", "changed", "drift", "new", "removed"
# How the matrix marks a change in a cell (the HTML page shades cells by them).
MARKERS = {REGRESSION: "▼", FIXED: "▲", CHANGED: "~", DRIFT: "≈"}
CHANGE_ORDER = (REGRESSION, FIXED, CHANGED, DRIFT, NEW, REMOVED)
_ENV_FIELDS = ("device", "backend", "driver", "torch", "triton", "numpy", "python", "harness", "tier", "implementation")


@dataclass(frozen=True)
class Change:
    """One id that differs between the runs; `tensor` and `delta` say what drifted most."""

    change: str
    case: str
    old: dict | None
    new: dict | None
    tensor: str | None = None
    delta: float | None = None


def classify(old_verdict: str, new_verdict: str) -> str | None:
    """regression, fixed, changed, or None for the same verdict."""
    if old_verdict == new_verdict:
        return None
    old_fails, new_fails = old_verdict in FAILING, new_verdict in FAILING
    if new_fails and not old_fails:
        return REGRESSION
    if old_fails and not new_fails:
        return FIXED
    return CHANGED


def _ratio_delta(old, new) -> float | None:
    if old is None or new is None:
        return None
    old, new = (math.inf if math.isnan(r) else r for r in (old, new))
    if math.isinf(old) or math.isinf(new):
        return 0.0 if old == new else math.inf
    return new - old


def _resource_delta(old, new) -> float | None:
    """Relative change of a compile resource (0 -> anything counts as that anything)."""
    if old is None or new is None:
        return None
    return (new - old) / max(old, 1)


def _measures(line: dict) -> dict:
    """What drifts: the ratio per tensor of a case, the resources of a compile check."""
    measures = {t["name"]: t.get("ratio") for t in line.get("tensors", [])}
    return measures | {name: line[name] for name in COMPILE_RESOURCES if line.get(name) is not None}


def largest_drift(old: dict, new: dict) -> tuple[str | None, float | None]:
    """The tensor (or compile resource) that moved most between two lines of one id, and by how much."""
    old_measures, found = _measures(old), (None, None)
    for name, value in _measures(new).items():
        moved = _resource_delta if name in COMPILE_RESOURCES else _ratio_delta
        delta = moved(old_measures.get(name), value)
        if delta is not None and (found[1] is None or abs(delta) > abs(found[1])):
            found = (name, delta)
    return found


def compare(old_lines: list[dict], new_lines: list[dict], drift: float = DEFAULT_DRIFT) -> list[Change]:
    """Every difference between two runs, in CHANGE_ORDER, ids in NEW's order (then OLD's)."""
    old_by_id = {line["case"]: line for line in old_lines}
    new_by_id = {line["case"]: line for line in new_lines}
    changes = []
    for case, new in new_by_id.items():
        old = old_by_id.get(case)
        if old is None:
            changes.append(Change(NEW, case, None, new))
            continue
        tensor, delta = largest_drift(old, new)
        change = classify(old["verdict"], new["verdict"])
        if change is None and delta is not None and abs(delta) > drift:
            change = DRIFT
        if change is not None:
            changes.append(Change(change, case, old, new, tensor, delta))
    changes += [Change(REMOVED, case, old, None) for case, old in old_by_id.items() if case not in new_by_id]
    return sorted(changes, key=lambda c: CHANGE_ORDER.index(c.change))


def has_regression(changes: list[Change]) -> bool:
    return any(change.change == REGRESSION for change in changes)


def counts_text(changes: list[Change]) -> str:
    counts = {name: sum(c.change == name for c in changes) for name in CHANGE_ORDER}
    return ", ".join(f"{name} {counts[name]}" for name in CHANGE_ORDER)


def _verdict(line: dict | None) -> str:
    return "-" if line is None else line["verdict"]


def _ratio(line: dict | None) -> str:
    return "-" if line is None else summary.format_ratio(line.get("worst_ratio"))


def _note(change: Change) -> str:
    """The tensor that moved most (with the signed change of its ratio) and NEW's reason."""
    parts = []
    if change.tensor in COMPILE_RESOURCES:
        parts.append(f"{change.tensor} {change.old[change.tensor]:,} -> {change.new[change.tensor]:,}")
    elif change.tensor is not None and change.delta:
        parts.append(f"{change.tensor} {'+' if change.delta > 0 else ''}{summary.format_ratio(change.delta)}")
    line = change.old if change.change == REMOVED else change.new
    if change.change != DRIFT and line["verdict"] != "pass" and line.get("reason"):
        parts.append(summary.one_line(line["reason"], 120))
    return "; ".join(parts)


def change_rows(changes: list[Change]) -> tuple[list[str], list[list]]:
    headers = ["change", "id", "old", "new", "old worst", "new worst", "note"]
    rows = [[c.change, c.case, _verdict(c.old), _verdict(c.new), _ratio(c.old), _ratio(c.new), _note(c)]
            for c in changes]
    return headers, rows


def env_rows(old_env: dict, new_env: dict) -> list[list[str]]:
    """The fingerprint fields that tell the two runs apart (and the device and triton, always)."""
    rows = []
    for key in _ENV_FIELDS:
        old, new = (summary.format_env_value(key, env.get(key)) for env in (old_env, new_env))
        if old != new or key in ("device", "triton"):
            rows.append([key, old, new])
    return rows


def render(old_env: dict, new_env: dict, changes: list[Change], fmt: str = "terminal",
           drift: float = DEFAULT_DRIFT) -> str:
    """The diff as text: `terminal` (ASCII grid) or `markdown` (GitHub tables)."""
    table = markdown.table if fmt == "markdown" else terminal.grid
    title = (f"{counts_text(changes)} (drift: |new - old| ratio > {drift:g}, "
             f"or a compile resource changed by more than {drift:.0%})")
    out = ["# Conformance diff" if fmt == "markdown" else "Conformance diff", "", title, "",
           table(["field", "old", "new"], env_rows(old_env, new_env)), ""]
    out += [table(*change_rows(changes)), ""] if changes else ["No differences.", ""]
    if has_regression(changes):
        out.append(f"REGRESSIONS: {sum(c.change == REGRESSION for c in changes)}")
    return "\n".join(out).rstrip() + "\n"
