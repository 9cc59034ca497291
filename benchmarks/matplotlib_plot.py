"""The benchmark plot with matplotlib (optional extra; importing this module fails
without it, and benchmarks/report.py then draws the SVG of benchmarks/svg.py)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLUMNS = 4


def write_png(path: Path, panels: list[tuple[str, dict]], colors: dict, dashes: dict, title: str) -> Path:
    """One subplot per (title, {(name, variant): [(x, y), ...]}), log2 x axis, shared y from 0."""
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    columns = min(COLUMNS, max(1, len(panels)))
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), sharey=True, squeeze=False)
    styles = {"": "-", "6 4": "--"}
    for axis, (panel_title, series) in zip(axes.flat, panels):
        for (name, variant), points in series.items():
            xs, ys = zip(*sorted(points))
            axis.plot(xs, ys, styles.get(dashes[variant], ":"), color=colors[name], marker="o", markersize=3,
                      label=f"{name} {variant}")
        axis.set_xscale("log", base=2)
        xs = sorted({x for points in series.values() for x, _ in points})
        axis.set_xticks(xs, [f"{x / 1024:g}k" for x in xs])
        axis.set_title(panel_title, fontsize=10)
        axis.set_xlabel("sequence length S")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    for axis in axes[:, 0]:
        axis.set_ylabel("TFLOP/s")
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(5, max(1, len(labels))), fontsize=8)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.08, 1, 0.95))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
