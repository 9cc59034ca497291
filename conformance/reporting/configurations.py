"""The per-configuration view of a run whose cases carry launch configurations (the
sweep tiers, `run --config`): verdicts grouped by kernel x configuration, and which
configurations fail, with a reproducer each."""

from __future__ import annotations

from collections import defaultdict

from conformance.judging import verdicts
from conformance.reporting.summary import CASE, format_ratio, of_kind, present_verdicts, verdict_totals, worst

_FAILING = (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR, verdicts.XPASS)


def _by_configuration(lines: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups = defaultdict(list)
    for line in of_kind(lines, CASE):
        if line.get("config"):
            kernel, _, config = line["config"].partition(":")
            groups[(kernel, config)].append(line)
    return groups


def configuration_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """One row per kernel x configuration: verdict counts, worst ratio, and the first
    failing case's reproducer (or the reason the configuration could not launch)."""
    groups = _by_configuration(lines)
    columns = present_verdicts([line for group in groups.values() for line in group])
    rows = []
    for (kernel, config), group in sorted(groups.items()):
        counts = verdict_totals(group)
        failing = [line for line in group if line["verdict"] in _FAILING]
        unsupported = [line for line in group if line["verdict"] == verdicts.UNSUPPORTED]
        note = failing[0].get("reproduce", "") if failing else (unsupported[0].get("reason", "") if unsupported else "")
        rows.append([kernel, config, *(counts[verdict] or "" for verdict in columns),
                     format_ratio(worst([line.get("worst_ratio") for line in group])), note])
    return ["kernel", "configuration", *columns, "worst ratio", "first failure / why not run"], rows


def kernel_totals(lines: list[dict]) -> tuple[list[str], list[list]]:
    """One row per kernel: configurations judged, all passing, with a failure, unable to launch."""
    per_kernel = defaultdict(lambda: [0, 0, 0, 0])
    for (kernel, _), group in _by_configuration(lines).items():
        verdicts_here = {line["verdict"] for line in group}
        totals = per_kernel[kernel]
        totals[0] += 1
        if verdicts_here & set(_FAILING):
            totals[2] += 1
        elif verdicts_here <= {verdicts.UNSUPPORTED}:
            totals[3] += 1
        else:
            totals[1] += 1
    headers = ["kernel", "configurations", "passing", "failing", "cannot launch / unsupported"]
    return headers, [[kernel, *counts] for kernel, counts in sorted(per_kernel.items())]


def failing_configurations(lines: list[dict]) -> list[str]:
    """`kernel:configuration` of every configuration with a failing case."""
    return sorted(f"{kernel}:{config}" for (kernel, config), group in _by_configuration(lines).items()
                  if any(line["verdict"] in _FAILING for line in group))
