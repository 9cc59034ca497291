"""Where a run's time went, for every report format: the cases' phases summed over the
run (conformance.phases, `phases` on each results line) and the run's own costs that
no case carries (env.json's `timing`: wall time, workers, the probes, writing results,
rendering reports; written by the plugin's recorder at the end of the run).

Case phases overlap in time when several workers run: their sum is worker time, and
`case s / wall s` says how many cases were in flight on average.
"""

from __future__ import annotations

from collections import defaultdict

from conformance.phases import CASE_PHASES
from conformance.reporting.summary import CASE, of_kind

TITLE = "Where the time went"
HEADERS = ["phase", "seconds", "share of case time", "ms per case"]
# Run-level costs in env.json's `timing`, by key, as the table names them.
RUN_COSTS = {"probes_s": "probes (once per run)", "results_s": "writing results lines",
             "report_s": "rendering reports"}
_PHASE_ORDER = (*CASE_PHASES, "isolation")


def phase_totals(lines: list[dict]) -> tuple[int, dict[str, float]]:
    """(cases that recorded phases, seconds per phase summed over them)."""
    totals, cases = defaultdict(float), 0
    for line in of_kind(lines, CASE):
        recorded = line.get("phases")
        if not recorded:
            continue
        cases += 1
        for name, seconds in recorded.items():
            totals[name] += seconds
    return cases, dict(totals)


def phase_table(env: dict, lines: list[dict]) -> tuple[list[str], list[list]]:
    """One row per phase (flow order), then the run's own costs and its wall time; no rows
    for a run whose lines carry no phases (runs from before the phases were recorded)."""
    cases, totals = phase_totals(lines)
    if not cases:
        return HEADERS, []
    case_seconds = sum(totals.values())
    ordered = [name for name in _PHASE_ORDER if name in totals] + sorted(set(totals) - set(_PHASE_ORDER))
    rows = [[name, f"{totals[name]:.1f}", _share(totals[name], case_seconds), f"{1000 * totals[name] / cases:.1f}"]
            for name in ordered]
    rows.append([f"all phases ({cases} cases)", f"{case_seconds:.1f}", "100%", f"{1000 * case_seconds / cases:.1f}"])
    timing = env.get("timing") or {}
    rows += [[label, f"{timing[key]:.1f}", "", ""] for key, label in RUN_COSTS.items() if timing.get(key) is not None]
    peaks = [line["gpu_peak_bytes"] for line in of_kind(lines, CASE) if line.get("gpu_peak_bytes")]
    if peaks:
        rows.append(["largest GPU memory of one case", f"{max(peaks) / 2**30:.2f} GiB", "", ""])
    if timing.get("wall_s"):
        wall = timing["wall_s"]
        total = len(of_kind(lines, CASE))  # with the cases that crashed or hung (no phases of their own)
        rows.append([f"wall time ({_workers(timing)})", f"{wall:.1f}", "",
                     f"{total / wall:.2f} cases/s, {case_seconds / wall:.1f} in flight"])
    return HEADERS, rows


def summary_text(env: dict, lines: list[dict]) -> str | None:
    """One sentence for the terminal: wall time, cases per second, the three largest phases."""
    cases, totals = phase_totals(lines)
    if not cases:
        return None
    largest = sorted(totals.items(), key=lambda item: -item[1])[:3]
    case_seconds = sum(totals.values()) or 1.0
    parts = ", ".join(f"{name} {seconds / case_seconds:.0%}" for name, seconds in largest)
    wall, total = (env.get("timing") or {}).get("wall_s"), len(of_kind(lines, CASE))  # crashed cases too
    pace = f"{total} cases in {wall:.1f} s ({total / wall:.2f}/s, {_workers(env['timing'])}); " if wall else ""
    return f"time: {pace}case time by phase: {parts} (summary.md: {TITLE.lower()})"


def _share(seconds: float, total: float) -> str:
    return f"{seconds / total:.1%}" if total else "-"


def _workers(timing: dict) -> str:
    workers = timing.get("workers") or 1
    return f"{workers} worker{'s' if workers != 1 else ''}"
