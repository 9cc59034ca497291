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
    row_excess: torch.Tensor | None = None  # (batch, heads, rows) excess, unnormalised, for key_attribution


def _finite_excess(kernel: torch.Tensor, ref: torch.Tensor, allowance: float,
                   exclude: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(excess with NaN/Inf positions at 0, those positions) over BOUND * allowance, float64."""
    a = kernel.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach().to(torch.float64)
    error = torch.where(a == r, 0.0, (a - r).abs())
    over = (error - BOUND * allowance).clamp_min(0.0)
    broken = ~torch.isfinite(over)
    if exclude is not None:
        over = torch.where(exclude.to(over.device), 0.0, over)
        broken &= ~exclude.to(over.device)
    return torch.where(broken, 0.0, over), broken


def excess(kernel: torch.Tensor, ref: torch.Tensor, allowance: float,
           exclude: torch.Tensor | None = None, stand_in: float | None = None) -> torch.Tensor:
    """Per-element excess over BOUND * allowance, float64, the shape of `ref` (module doc);
    a NaN/Inf stands at `stand_in` (default: the largest finite excess given, or the allowance)."""
    over, broken = _finite_excess(kernel, ref, allowance, exclude)
    if stand_in is None:
        stand_in = _stand_in(float(over.max()) if over.numel() else 0.0, allowance)
    return torch.where(broken, stand_in, over)


def _stand_in(largest_finite: float, allowance: float) -> float:
    return max(largest_finite, BOUND * allowance, 1e-30)


# Elements per pass of `profiles`: its float64 temporaries stay near 100 MB whatever the tensor
# (at S = 32k, B1 H16 D128 a whole output is 67M elements: 0.5 GB per float64 copy).
CHUNK_ELEMENTS = 2**24


class _Sums:
    """What `profiles` accumulates over chunks of (batch, head) slices."""

    def __init__(self, slices: int, rows: int, columns: int | None, device):
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
        self.per_row, self.columns = zeros(slices, rows), zeros(columns) if columns else None
        self.offending = self.nonfinite = 0
        self.largest = 0.0
        self.error_energy = self.ref_energy = self.cross = 0.0  # for the common factor

    def add(self, first: int, kernel: torch.Tensor, ref: torch.Tensor, over: torch.Tensor) -> None:
        self.per_row[first:first + over.shape[0]] = over.sum(dim=-1) if self.columns is not None else over
        if self.columns is not None:
            self.columns += over.sum(dim=(0, 1))
        self.offending += int((over > 0).sum())
        self.largest = max(self.largest, float(over.max()) if over.numel() else 0.0)
        a = kernel.detach().to(device=ref.device, dtype=torch.float64)
        r = ref.detach().to(torch.float64)
        self.nonfinite += int((~torch.isfinite(a) & torch.isfinite(r)).sum())
        finite = torch.isfinite(a) & torch.isfinite(r)
        e, r = torch.where(finite, a - r, 0.0), torch.where(finite, r, 0.0)
        self.error_energy += float((e * e).sum())
        self.ref_energy += float((r * r).sum())
        self.cross += float((e * r).sum())

    def factor(self) -> float | None:
        """f with kernel ~ f * ref when that explains >= 90% of the squared error (a scale, a
        missing normalisation), else None: least squares, residual = E - cross^2 / R."""
        if self.error_energy == 0 or self.ref_energy == 0:
            return None
        residual = self.error_energy - self.cross ** 2 / self.ref_energy
        return 1.0 + self.cross / self.ref_energy if residual <= 0.1 * self.error_energy else None


def profiles(kernel: torch.Tensor, ref: torch.Tensor, allowance: float,
             exclude: torch.Tensor | None = None) -> Profiles:
    """The shares of `kernel`'s excess over `ref` along slices, rows and columns, computed
    over chunks of (batch, head) slices (CHUNK_ELEMENTS)."""
    batch, heads, rows = ref.shape[:3]
    has_columns = ref.dim() == 4
    flat = lambda x: x.reshape(batch * heads, *x.shape[2:]) if x is not None else None  # noqa: E731
    kernel_slices, ref_slices, exclude_slices = flat(kernel), flat(ref), flat(exclude)
    sums = _Sums(batch * heads, rows, ref.shape[-1] if has_columns else None, ref.device)
    step = max(1, CHUNK_ELEMENTS // max(1, ref[0, 0].numel()))
    parts = [(first, slice(first, first + step)) for first in range(0, batch * heads, step)]
    excluded = lambda part: exclude_slices[part] if exclude_slices is not None else None  # noqa: E731
    # Two passes: a NaN/Inf stands at the tensor's largest finite excess, whichever chunk holds it.
    largest = max(float(_finite_excess(kernel_slices[part], ref_slices[part], allowance, excluded(part))[0].max())
                  for _, part in parts)
    for first, part in parts:
        over = excess(kernel_slices[part], ref_slices[part], allowance, excluded(part), _stand_in(largest, allowance))
        sums.add(first, kernel_slices[part], ref_slices[part], over)
    total = float(sums.per_row.sum())
    scale = 1.0 / total if total > 0 else 0.0
    per_row = sums.per_row.reshape(batch, heads, rows)
    return Profiles(
        total=total, elements=ref.numel(), offending=sums.offending,
        slices=(per_row.sum(dim=-1) * scale).cpu(), rows=(per_row.sum(dim=(0, 1)) * scale).cpu(),
        columns=(sums.columns * scale).cpu() if has_columns else None,
        largest_element=sums.largest * scale, factor=sums.factor(), nonfinite=sums.nonfinite,
        row_excess=per_row,
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
