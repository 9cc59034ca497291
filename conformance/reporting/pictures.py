"""The HTML report's pictures, as plain HTML and inline SVG (no external assets).

* Heat map: worst ratio over (dtype, head dim), one per operator and direction.
  The colour scale is diverging and centred on the bound 2 in log2 space: blue
  below (darker = further under the bound), white at 2, red above; cells over
  the bound also get a thick border, so the bound stays visible without colour.
* Ratio distribution: a histogram of every recorded tensor ratio, one per tensor
  name, on log2 bins of a quarter octave with the bound drawn as a line.
"""

from __future__ import annotations

import math
from html import escape

from conformance.cases.catalog import DTYPES
from conformance.reporting import summary

# conformance.judging.rule.BOUND (equal by a test; importing rule would load torch into every report).
BOUND = 2.0
# Scale ends: ratios at or beyond these get the deepest colour.
LOW_END, HIGH_END = BOUND / 8, BOUND * 4
_BLUE, _WHITE, _RED = (33, 102, 172), (247, 247, 247), (178, 24, 43)
NONFINITE_COLOUR = "#40004b"
LEGEND_TICKS = (0.25, 0.5, 1, 2, 4, 8)

# Histogram bins: (2^((k-1)/4), 2^(k/4)] for k in BIN_RANGE; the first bin also
# takes everything smaller (0 included), the last everything larger (inf, NaN).
BINS_PER_OCTAVE = 4
BIN_RANGE = range(-6 * BINS_PER_OCTAVE, 3 * BINS_PER_OCTAVE + 1)
_BAR, _PLOT_H, _LEFT, _TOP, _BOTTOM = 14, 90, 44, 22, 30
_BOUND_LABEL = ' font-weight="bold" class="bound"'
_HISTOGRAM_TICKS = ((1 / 64, "1/64", ""), (1 / 16, "1/16", ""), (0.25, "1/4", ""), (1, "1", ""),
                    (BOUND, "bound 2", _BOUND_LABEL), (4, "4", ""), (8, "8", ""))


def _mix(a, b, t: float) -> str:
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


def colour(ratio: float | None) -> str:
    """Background colour of a worst ratio on the diverging scale centred on the bound."""
    if ratio is None:
        return "#e0e0e0"
    if not math.isfinite(ratio):
        return NONFINITE_COLOUR
    if ratio <= BOUND:
        position = math.log2(BOUND / max(ratio, LOW_END)) / math.log2(BOUND / LOW_END)
        return _mix(_WHITE, _BLUE, position)
    return _mix(_WHITE, _RED, 0.25 + 0.75 * math.log2(min(ratio, HIGH_END) / BOUND) / math.log2(HIGH_END / BOUND))


def _text_colour(ratio: float | None) -> str:
    dark = ratio is not None and (not math.isfinite(ratio) or ratio < BOUND / 5 or ratio > BOUND * 2)
    return "#fff" if dark else "#111"


def _failing(cell: summary.HeatCell) -> bool:
    return any(verdict in summary.PROBLEM_VERDICTS for verdict in cell.verdicts)


def _cell(cell: summary.HeatCell | None) -> str:
    if cell is None:
        return '<td class="hm-empty">·</td>'
    problems = ", ".join(f"{count} {verdict}" for verdict, count in cell.verdicts.items()
                         if verdict not in ("pass", "unsupported"))
    if cell.worst is None:
        label = "unsupported" if cell.verdicts.get("unsupported") == cell.count else "no ratio"
        outline = " hm-over" if _failing(cell) else ""
        return (f'<td class="hm-none{outline}">{label}<br>'
                f'<small>n={cell.count}{"; " + escape(problems) if problems else ""}</small></td>')
    over = cell.worst > BOUND or not math.isfinite(cell.worst) or _failing(cell)
    style = f"background:{colour(cell.worst)};color:{_text_colour(cell.worst)}"
    return (f'<td class="hm{" hm-over" if over else ""}" style="{style}">'
            f'<b>{escape(summary.format_ratio(cell.worst))}</b><br>'
            f'<small>n={cell.count}{"; " + escape(problems) if problems else ""}</small></td>')


def heatmap(op: str, direction: str, cells: dict[tuple, summary.HeatCell]) -> str:
    """One operator and direction: dtype rows by head-dim columns of worst ratio."""
    dtypes = sorted({dtype for dtype, _ in cells}, key=lambda d: DTYPES.index(d) if d in DTYPES else len(DTYPES))
    dims = sorted({dim for _, dim in cells}, key=lambda d: (d is None, d or 0))
    head = "".join(f"<th>d{dim}</th>" for dim in dims)
    rows = "".join(f"<tr><th>{escape(str(dtype))}</th>{''.join(_cell(cells.get((dtype, dim))) for dim in dims)}</tr>"
                   for dtype in dtypes)
    return (f'<div class="heatmap"><h3>{escape(str(op))} · {escape(str(direction))}</h3>'
            f'<table class="hm-table"><tr><th>dtype \\ D</th>{head}</tr>{rows}</table></div>')


def legend() -> str:
    """The colour scale as a gradient bar with ticks, the bound marked."""
    width, pad = 420, 16
    position = lambda r: pad + width * math.log2(r / LOW_END) / math.log2(HIGH_END / LOW_END)  # noqa: E731
    stops = "".join(f'<stop offset="{(position(r) - pad) / width:.3f}" stop-color="{colour(r)}"/>'
                    for r in (LOW_END, 0.5, 1, 1.5, BOUND, 2.0001, 3, HIGH_END))
    ticks = "".join(f'<line x1="{position(r):.1f}" x2="{position(r):.1f}" y1="22" y2="27" stroke="#333"/>'
                    f'<text x="{position(r):.1f}" y="39" text-anchor="middle">{r:g}</text>' for r in LEGEND_TICKS)
    bound = position(BOUND)
    return (f'<div class="legend"><svg width="{width + 150}" height="46" role="img" '
            f'aria-label="colour scale of the worst ratio, bound 2">'
            f'<defs><linearGradient id="scale">{stops}</linearGradient></defs>'
            f'<rect x="{pad}" y="6" width="{width}" height="16" fill="url(#scale)" stroke="#999"/>{ticks}'
            f'<line x1="{bound:.1f}" x2="{bound:.1f}" y1="0" y2="28" stroke="#000" stroke-width="3"/>'
            f'<text x="{bound + 5:.1f}" y="4" dominant-baseline="hanging" font-weight="bold">bound 2</text>'
            f'<rect x="{pad + width + 14}" y="6" width="16" height="16" fill="{NONFINITE_COLOUR}"/>'
            f'<text x="{pad + width + 36}" y="19">inf / NaN</text></svg>'
            f'<p class="note">worst ratio = kernel_err / max(torch_err, floor); pass iff every tensor ≤ 2. '
            f'Blue: under the bound; red: over it; thick border: over the bound or a case that fails the run '
            f'(fail, nonfinite, error, xpass); grey: no ratio (unsupported, error). '
            f'n = cases in the cell.</p></div>')


def _bin_index(ratio: float) -> int:
    if math.isnan(ratio) or ratio > 2 ** (BIN_RANGE[-1] / BINS_PER_OCTAVE):
        return len(BIN_RANGE) - 1
    if ratio <= 2 ** ((BIN_RANGE[0] - 1) / BINS_PER_OCTAVE):
        return 0
    return min(max(math.ceil(math.log2(ratio) * BINS_PER_OCTAVE) - BIN_RANGE[0], 0), len(BIN_RANGE) - 1)


def _x_of(ratio: float) -> float:
    """x of a bin edge value (the upper edge 2^(k/4) of bin k)."""
    return _LEFT + _BAR * (math.log2(ratio) * BINS_PER_OCTAVE - BIN_RANGE[0] + 1)


def histogram(name: str, ratios: list[float]) -> str:
    """Counts of one tensor's ratios per quarter-octave bin, bound line at 2."""
    counts = [0] * len(BIN_RANGE)
    for ratio in ratios:
        counts[_bin_index(ratio)] += 1
    peak = max(counts) or 1
    width = _LEFT + _BAR * len(BIN_RANGE) + 10
    bars = []
    for index, count in enumerate(counts):
        if not count:
            continue
        height = max(_PLOT_H * count / peak, 1.5)
        x, y = _LEFT + index * _BAR, _TOP + _PLOT_H - height
        over = BIN_RANGE[index] > BINS_PER_OCTAVE  # bins above (2, ...]
        bars.append(f'<rect x="{x + 1}" y="{y:.1f}" width="{_BAR - 2}" height="{height:.1f}" '
                    f'fill="{"#b2182b" if over else "#2166ac"}"><title>{count}</title></rect>'
                    f'<text x="{x + _BAR / 2}" y="{y - 2:.1f}" class="count">{count}</text>')
    ticks = "".join(f'<line x1="{_x_of(r):.1f}" x2="{_x_of(r):.1f}" y1="{_TOP + _PLOT_H}" '
                    f'y2="{_TOP + _PLOT_H + 4}" stroke="#333"/><text x="{_x_of(r):.1f}" y="{_TOP + _PLOT_H + 16}" '
                    f'text-anchor="middle"{attributes}>{label}</text>'
                    for r, label, attributes in _HISTOGRAM_TICKS)
    bound = _x_of(BOUND)
    plural = "" if len(ratios) == 1 else "s"
    worst, median = (escape(summary.format_ratio(value)) for value in (summary.worst(ratios), summary.median(ratios)))
    title = f"{escape(name)}: {len(ratios)} ratio{plural}, worst {worst}, median {median}"
    return (f'<svg class="hist" width="{width}" height="{_TOP + _PLOT_H + _BOTTOM}" role="img" '
            f'aria-label="histogram of {escape(name)} ratios">'
            f'<text x="{_LEFT}" y="13" class="title">{title}</text>'
            f'<text x="{_LEFT - 6}" y="{_TOP + 4}" text-anchor="end">{peak}</text>'
            f'<text x="{_LEFT - 6}" y="{_TOP + _PLOT_H}" text-anchor="end">0</text>'
            f'<line x1="{_LEFT}" x2="{width - 10}" y1="{_TOP + _PLOT_H}" y2="{_TOP + _PLOT_H}" stroke="#333"/>'
            f'{"".join(bars)}{ticks}'
            f'<line x1="{bound:.1f}" x2="{bound:.1f}" y1="{_TOP - 6}" y2="{_TOP + _PLOT_H}" stroke="#000" '
            f'stroke-width="2" stroke-dasharray="5 3"/></svg>')


def distribution(samples: dict[str, list[float]]) -> str:
    """One histogram per tensor name."""
    note = ('<p class="note">Every recorded tensor ratio, binned per quarter octave (x is logarithmic); '
            'the first bin holds everything ≤ 1/64 (exact results: 0), the last everything > 8 (inf, NaN). '
            'Red bars are over the bound.</p>')
    return note + "".join(f'<div class="hist-box">{histogram(name, ratios)}</div>' for name, ratios in samples.items())
