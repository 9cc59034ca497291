"""How the diagnosis of a failing case reads in a report (conformance.diagnosing): the
error in ulps beside torch's, the fault pattern with its evidence, the regions, the error
strip, and the smallest failing case that `shrink` found.

Plain data and text here; the format modules lay them out.
"""

from __future__ import annotations

from html import escape


def ulps_text(tensor: dict) -> str:
    """'median/p99 ulps, torch median/p99', or '-' for a line without them."""
    ulps = tensor.get("ulps")
    if not ulps or ulps.get("median") is None:
        return "-"
    return f"{_n(ulps['median'])}/{_n(ulps['p99'])} (torch {_n(ulps['torch_median'])}/{_n(ulps['torch_p99'])})"


def pattern_text(tensor: dict) -> str:
    where = tensor.get("where")
    return where["pattern"] if where else ""


def _n(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _top(axis: dict | None, unit: str, grid_word: bool = True) -> str:
    if not axis:
        return ""
    size = f" of {axis['grid']}" if grid_word and "grid" in axis else ""
    shown = ", ".join(f"{unit} {_index(index, axis)} {share:.0%}" for index, share in axis["top"][:4])
    return f"{axis['with_excess']} of {axis.get('blocks', axis.get('of'))} {unit}s{size} carry excess ({shown})"


def _index(index, axis: dict) -> str:
    if isinstance(index, list):
        return f"(batch {index[0]}, head {index[1]})"
    grid = axis.get("grid")
    return f"{index * grid}..{(index + 1) * grid - 1}" if grid else str(index)


def where_lines(line: dict) -> list[str]:
    """One line per failing tensor: pattern, evidence, then the regions it was read from."""
    out = []
    for tensor in line.get("tensors", []):
        where = tensor.get("where")
        if not where:
            continue
        out.append(f"{tensor['name']}: {where['pattern']} -- {where['evidence']}")
        regions = [_top(where.get("slices"), "slice", False),
                   _top(where.get("rows"), f"{where.get('row_axis', 'query')}-row block"),
                   _top(where.get("rows_at_tile"), "kernel-tile block"),
                   _top(where.get("key_blocks"), "key block"),
                   _top(where.get("key_blocks_at_tile"), "kernel-tile key block"),
                   _top(where.get("query_blocks"), "query block") if where.get("row_axis") == "key" else "",
                   _top(where.get("query_blocks_at_tile"), "kernel-tile query block")
                   if where.get("row_axis") == "key" else "",
                   _top(where.get("columns"), "column", False)]
        out += [f"    {region}" for region in regions if region]
    shrunk = line.get("shrunk")
    if shrunk:
        out.append(f"smallest failing case: {shrunk['case']} ({shrunk['tried']} smaller cases tried, "
                   f"{shrunk['seconds']:.0f} s{'' if shrunk.get('complete', True) else ', budget spent'})")
        out.append(f"    reproduce it: {shrunk['reproduce']}")
    return out


def strip_svg(tensor: dict, cell: int = 6) -> str:
    """The error strip of a failing tensor as a small SVG heat map: query blocks down, key
    blocks across, darker = more of the excess; '' when the tensor has no strip."""
    strip = (tensor.get("where") or {}).get("strip")
    if not strip or not strip["shares"]:
        return ""
    shares = strip["shares"]
    largest = max(max(row) for row in shares) or 1.0
    cells = "".join(
        f'<rect x="{j * cell}" y="{i * cell}" width="{cell}" height="{cell}" '
        f'fill="rgb(200,30,30)" fill-opacity="{share / largest:.2f}"/>'
        for i, row in enumerate(shares) for j, share in enumerate(row) if share > 0)
    width, height = len(shares[0]) * cell, len(shares) * cell
    title = (f"{tensor['name']}: share of the excess per (query block of {strip['grid'] * strip['query_bin']} rows, "
             f"key block of {strip['grid'] * strip['key_bin']} keys)")
    return (f'<figure class="strip"><svg width="{width}" height="{height}" role="img">'
            f'<title>{escape(title)}</title><rect width="{width}" height="{height}" fill="#f4f4f4"/>{cells}</svg>'
            f'<figcaption>{escape(title)}</figcaption></figure>')
