"""Compile time of implementations that compile per case (flex: torch.compile), apart from
the cases' time, for every report format.

A case line of such an implementation carries `compile_s` (seconds spent compiling during
the case) and `compilations` (how many compilations torch reported: frame compiles and
backward graphs compiled at the first backward) next to `duration_s` (the whole case,
compilation included; conformance.running.runner.run_case). Lines without those fields
(the bundled kernels, whose Triton compilation the harness does not time) are not counted.
"""

from __future__ import annotations

from collections import defaultdict

TITLE = "Compile time (torch.compile), apart from case time"
HEADERS = ["implementation", "cases", "compilations", "compile s", "case s (incl. compile)", "compile share"]


def compile_time_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Per implementation that reported compilation: its cases, compilations, total compile
    seconds, total case seconds and the share of the latter spent compiling."""
    totals = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for line in lines:
        if line.get("compile_s") is None or line.get("kind", "case") != "case":
            continue
        total = totals[line.get("implementation") or "?"]
        total[0] += 1
        total[1] += line.get("compilations") or 0
        total[2] += line["compile_s"]
        total[3] += line.get("duration_s") or 0.0
    rows = [[name, cases, compilations, f"{compile_s:.1f}", f"{case_s:.1f}",
             f"{compile_s / case_s:.0%}" if case_s else "-"]
            for name, (cases, compilations, compile_s, case_s) in totals.items()]
    return HEADERS, rows
