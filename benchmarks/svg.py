"""A small hand-written SVG line plot: panels of series against a log2 x axis.

The benchmark plot: no plotting dependency, the same picture on every machine.
Plain SVG 1.1, no scripts or fonts
beyond sans-serif; GitHub and browsers render it inline.
"""

from __future__ import annotations

import math
from html import escape

PANEL_W, PANEL_H, COLUMNS = 330, 240, 4
MARGIN = dict(left=52, right=12, top=28, bottom=40)
LEGEND_ROW = 22


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= value (axis top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def _text(x, y, text, size=11, anchor="middle", weight="normal", rotate=None) -> str:
    transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}"{transform}>{escape(str(text))}</text>')


def _x_label(value: float) -> str:
    return f"{value / 1024:g}k" if value >= 1024 else f"{value:g}"


def _panel(origin_x, origin_y, title, series, colors, dashes, x_values, y_top, labels) -> list[str]:
    """One panel's SVG elements: frame, grid, ticks, title, polylines with markers."""
    left, top = origin_x + MARGIN["left"], origin_y + MARGIN["top"]
    width = PANEL_W - MARGIN["left"] - MARGIN["right"]
    height = PANEL_H - MARGIN["top"] - MARGIN["bottom"]
    low, high = math.log2(min(x_values)) - 0.25, math.log2(max(x_values)) + 0.25  # points off the frame
    span = high - low

    def to_x(value):
        return left + (math.log2(value) - low) / span * width

    def to_y(value):
        return top + height - value / y_top * height

    out = [f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="white" stroke="#888"/>',
           _text(left + width / 2, origin_y + 18, title, size=12, weight="bold")]
    for step in range(6):
        value = y_top * step / 5
        out += [f'<line x1="{left}" y1="{to_y(value):.1f}" x2="{left + width}" y2="{to_y(value):.1f}" '
                f'stroke="#e6e6e6"/>', _text(left - 5, to_y(value) + 4, f"{value:g}", size=10, anchor="end")]
    for value in x_values:
        out.append(_text(to_x(value), top + height + 14, _x_label(value), size=10))
    out.append(_text(left + width / 2, top + height + 30, labels[0], size=11))
    out.append(_text(origin_x + 14, top + height / 2, labels[1], size=11, rotate=-90))
    for (name, variant), points in series.items():
        color, dash = colors[name], dashes[variant]
        coords = " ".join(f"{to_x(x):.1f},{to_y(y):.1f}" for x, y in sorted(points))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>')
        out += [f'<circle cx="{to_x(x):.1f}" cy="{to_y(y):.1f}" r="2.5" fill="{color}"/>' for x, y in points]
    return out


def _legend(entries: list[tuple[str, str, str]], y: float) -> list[str]:
    """One row of (label, colour, dash) samples."""
    out, x = [], MARGIN["left"]
    for label, color, dash in entries:
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x}" y1="{y}" x2="{x + 26}" y2="{y}" stroke="{color}" stroke-width="2"{dash_attr}/>')
        out.append(_text(x + 31, y + 4, label, anchor="start"))
        x += 44 + 7 * len(label)
    return out


def line_panels(panels: list[tuple[str, dict]], colors: dict, dashes: dict, x_label: str, y_label: str,
                title: str) -> str:
    """An SVG document: one panel per (title, {(name, variant): [(x, y), ...]}), a shared
    y scale from 0, a log2 x axis ticked at the data's x values; a series is drawn in
    its name's colour and its variant's dash pattern ("" = solid), both explained in
    the legend below the panels."""
    points = [point for _, series in panels for values in series.values() for point in values]
    x_values = sorted({x for x, _ in points}) or [1]
    y_top = nice_ceiling(max((y for _, y in points), default=1.0))
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    columns = min(COLUMNS, max(1, len(panels)))
    width, height = columns * PANEL_W, 30 + rows * PANEL_H + 2 * LEGEND_ROW
    body = [_text(width / 2, 20, title, size=14, weight="bold")]
    for index, (panel_title, series) in enumerate(panels):
        origin = ((index % COLUMNS) * PANEL_W, 30 + (index // COLUMNS) * PANEL_H)
        body += _panel(*origin, panel_title, series, colors, dashes, x_values, y_top, (x_label, y_label))
    legend = [(name, color, "") for name, color in colors.items()]
    legend += [(variant, "#444", dash) for variant, dash in dashes.items()]
    body += _legend(legend, 30 + rows * PANEL_H + LEGEND_ROW)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">\n'
            f'<rect width="{width}" height="{height}" fill="#fafafa"/>\n' + "\n".join(body) + "\n</svg>\n")
