"""Which GPU each case ran on: the per-GPU view of a multi-GPU run (one pytest-xdist
worker per GPU, conformance.running.devices), from the results lines' `device_index`
and env.json's `gpus`."""

from __future__ import annotations

from collections import defaultdict

from conformance.reporting.summary import CASE, of_kind, present_verdicts, verdict_totals


def gpu_table(env: dict, lines: list[dict]) -> tuple[list[str], list[list]]:
    """One row per GPU that ran cases: index, name, UUID, verdict counts; none for runs
    that did not record devices (CPU runs, reports from before device_index)."""
    by_index = defaultdict(list)
    for line in of_kind(lines, CASE):
        if line.get("device_index") is not None:
            by_index[line["device_index"]].append(line)
    if not by_index:
        return [], []
    gpus = {gpu.get("index"): gpu for gpu in env.get("gpus") or []}
    columns = present_verdicts([line for group in by_index.values() for line in group])
    rows = []
    for index in sorted(by_index):
        gpu, counts = gpus.get(index, {}), verdict_totals(by_index[index])
        rows.append([index, gpu.get("name", "?"), gpu.get("uuid") or "-", len(by_index[index]),
                     *(counts[verdict] or "" for verdict in columns)])
    return ["GPU", "name", "UUID", "cases", *columns], rows
