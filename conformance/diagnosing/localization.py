"""Where a failing tensor's excess error sits.

The *excess* of an element is how far its error goes past what the rule allows the whole
tensor: max(0, |kernel - ref| - BOUND * max(torch_err, floor)). Elements within the
allowance carry none, so a fault reads as the region it damaged, not as the rounding noise
around it. A NaN or Inf where the reference is finite carries the largest finite excess
(or the allowance itself when there is none): it is at least that wrong.

Shares of the total excess are taken along every axis the tensor has -- (batch, head)
slices, rows, head-dim columns -- and, through key_attribution, along the other axis of
attention (the key blocks of a query row). `record` turns them into the `where` object of
a results line; fault_patterns names what they show.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.diagnosing.geometry import GRID, Geometry
from conformance.judging.rule import BOUND

# Shares below this are left out of the top lists of a record (they stay in the profiles).
SHOWN_SHARE = 0.005
TOP = 8
# The error strip of a report is at most this many bins along each axis.
STRIP_BINS = 32


@dataclass
class Profiles:
    """Shares of a tensor's excess along each axis (each sums to 1 where there is excess)."""

    total: float
    elements: int
    offending: int
    slices: torch.Tensor            # (batch, heads)
    rows: torch.Tensor              # (rows,)
    columns: torch.Tensor | None    # (head_dim,), None for a tensor without one (lse, total)
    largest_element: float          # the share of the single worst element
    factor: float | None            # kernel ~ factor * ref, when that explains the error
    nonfinite: int
    # (query bins, key bins + 1) at map_grid, from key_attribution; the last column is the
    # zero padding of a tile-rounded load beyond Sk
    map: torch.Tensor | None = None
    map_grid: int = GRID
    padding_keys: float | None = None  # zero keys whose padding explains the last column, if any


def excess(kernel: torch.Tensor, ref: torch.Tensor, allowance: float,
           exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element excess over BOUND * allowance, float64, the shape of `ref` (module doc)."""
    a = kernel.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    error = torch.where(a == r, 0.0, (a - r).abs())
    over = (error - BOUND * allowance).clamp_min(0.0)
    broken = ~torch.isfinite(over)
    if exclude is not None:
        over = torch.where(exclude.to(over.device), 0.0, over)
        broken &= ~exclude.to(over.device)
    finite_over = torch.where(broken, 0.0, over)
    stand_in = max(float(finite_over.max()) if finite_over.numel() else 0.0, BOUND * allowance, 1e-30)
    return torch.where(broken, stand_in, finite_over)


def common_factor(kernel: torch.Tensor, ref: torch.Tensor) -> float | None:
    """f with kernel ~ f * ref when that explains >= 90% of the squared error (a scale,
    a missing normalisation), else None. Least squares over the finite elements."""
    a = kernel.detach().to(device=ref.device, dtype=torch.float64).flatten()
    r = ref.detach().to(torch.float64).flatten()
    finite = torch.isfinite(a) & torch.isfinite(r)
    a, r = a[finite], r[finite]
    error = a - r
    energy, norm = float((error * error).sum()), float((r * r).sum())
    if energy == 0 or norm == 0:
        return None
    alpha = float((error * r).sum()) / norm
    residual = float(((error - alpha * r) ** 2).sum())
    return 1.0 + alpha if residual <= 0.1 * energy else None


def profiles(kernel: torch.Tensor, ref: torch.Tensor, allowance: float,
             exclude: torch.Tensor | None = None) -> Profiles:
    """The shares of `kernel`'s excess over `ref` along slices, rows and columns."""
    over = excess(kernel, ref, allowance, exclude)
    total = float(over.sum())
    scale = 1.0 / total if total > 0 else 0.0
    has_columns = over.dim() == 4
    per_row = over.sum(dim=-1) if has_columns else over          # (B, H, S)
    nonfinite = ~torch.isfinite(kernel.detach().to(ref.device)) & torch.isfinite(ref.detach())
    return Profiles(
        total=total, elements=over.numel(), offending=int((over > 0).sum()),
        slices=(per_row.sum(dim=-1) * scale).cpu(),
        rows=(per_row.sum(dim=(0, 1)) * scale).cpu(),
        columns=(over.sum(dim=(0, 1, 2)) * scale).cpu() if has_columns else None,
        largest_element=float(over.max()) * scale if over.numel() else 0.0,
        factor=common_factor(kernel, ref),
        nonfinite=int(nonfinite.sum()),
    )


def binned(shares: torch.Tensor, size: int) -> torch.Tensor:
    """Sum consecutive runs of `size` entries along the last axis (the last run may be short)."""
    length = shares.shape[-1]
    padded = torch.nn.functional.pad(shares, (0, -length % size))
    return padded.reshape(*shares.shape[:-1], -1, size).sum(dim=-1)


def _top(shares: torch.Tensor) -> list:
    """[[index, share], ...] of the largest shares >= SHOWN_SHARE, largest first."""
    flat = shares.flatten()
    order = torch.argsort(flat, descending=True)[:TOP]
    index = (lambda i: list(divmod(i, shares.shape[1]))) if shares.dim() == 2 else (lambda i: i)
    return [[index(int(i)), round(float(flat[i]), 3)] for i in order if float(flat[i]) >= SHOWN_SHARE]


def _axis(shares: torch.Tensor, grid: int | None) -> dict | None:
    if grid is None:
        return None
    blocks = binned(shares, grid)
    return {"grid": grid, "blocks": blocks.numel(), "with_excess": int((blocks > 0).sum()), "top": _top(blocks)}


def strip(shares: torch.Tensor) -> dict:
    """A (query bins x key bins) map shrunk to at most STRIP_BINS per axis, for the HTML report."""
    rows_per_bin = -(-shares.shape[0] // STRIP_BINS)
    cols_per_bin = -(-shares.shape[1] // STRIP_BINS)
    small = binned(binned(shares, cols_per_bin).T, rows_per_bin).T
    return {"query_bin": rows_per_bin, "key_bin": cols_per_bin,
            "shares": [[round(float(x), 3) for x in row] for row in small]}


def _map_axis(shares: torch.Tensor, grid: int, bins_per_block: int) -> dict:
    blocks = binned(shares, bins_per_block)
    return {"grid": grid, "blocks": blocks.numel(), "with_excess": int((blocks > 0).sum()), "top": _top(blocks)}


def record(found: Profiles, geometry: Geometry) -> dict:
    """The JSON-able `where` object of a results line (without the pattern)."""
    where = {
        "excess_elements": found.offending, "elements": found.elements,
        "slices": {"of": found.slices.numel(), "with_excess": int((found.slices > 0).sum()),
                   "top": _top(found.slices)},
        "row_axis": "key" if geometry.key_rows else "query",
        "rows": _axis(found.rows, GRID),
        "rows_at_tile": _axis(found.rows, geometry.row_tile),
        "largest_element_share": round(found.largest_element, 3),
    }
    if found.columns is not None:
        where["columns"] = {"of": found.columns.numel(), "with_excess": int((found.columns > 0).sum()),
                            "top": _top(found.columns)}
    if found.factor is not None:
        where["common_factor"] = float(f"{found.factor:.4g}")
    if found.map is not None:
        for axis, shares, tile in (("key", found.map[:, :-1].sum(dim=0), geometry.key_tile),
                                   ("query", found.map.sum(dim=1), geometry.query_tile)):
            where[f"{axis}_blocks"] = _map_axis(shares, found.map_grid, 1)
            if tile and tile % found.map_grid == 0:
                where[f"{axis}_blocks_at_tile"] = _map_axis(shares, tile, tile // found.map_grid)
        where["row_scaling_share"] = round(float(found.map[:, -1].sum()), 3)
        if found.padding_keys is not None:
            where["padding_keys"] = round(found.padding_keys, 1)
        where["strip"] = {**strip(found.map[:, :-1]), "grid": found.map_grid}
    return where
