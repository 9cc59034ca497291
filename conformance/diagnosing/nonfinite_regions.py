"""Where a tensor's NaN/Inf sit, named as a region.

A non-finite element outweighs any finite error, so where there are any, the region is read
from their mask (kernel not finite where the reference is) rather than from the excess: a
tensor with Inf in 24 of 32 query blocks is those blocks, not "every row uniformly".

The mask is reduced to its footprint -- per (batch, head) slice, the rows and head-dim
columns that hold a non-finite element, and how many -- and named in the vocabulary of
fault_patterns: one element, rows or blocks of rows, head-dim columns, heads, batches,
slices; "every row uniformly" only when every row of every slice holds one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.diagnosing.geometry import Geometry, pattern_grid

# Elements per pass over the tensor (as localization.CHUNK_ELEMENTS).
CHUNK_ELEMENTS = 2**24
# Runs of indices listed before the rest are only counted; groups of slices likewise.
RUNS_SHOWN = 6
GROUPS_SHOWN = 4


@dataclass
class Footprint:
    """Where the non-finite elements of a (batch, heads, rows[, head_dim]) tensor are."""

    rows: torch.Tensor             # (batch, heads, rows) bool: the row holds one
    columns: torch.Tensor | None   # (batch, heads, head_dim) bool, None without a head dim
    counts: torch.Tensor           # (batch, heads) how many each slice holds

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def footprint(kernel: torch.Tensor, ref: torch.Tensor, exclude: torch.Tensor | None = None) -> Footprint | None:
    """The footprint of `kernel`'s non-finite elements where `ref` is finite (outside
    `exclude`), or None when there are none."""
    batch, heads, rows = ref.shape[:3]
    has_columns = ref.dim() == 4
    flat = lambda x: x.reshape(batch * heads, *x.shape[2:])  # noqa: E731
    kernel_slices, ref_slices = flat(kernel.detach()), flat(ref.detach())
    exclude_slices = flat(exclude) if exclude is not None else None
    row_any = torch.zeros(batch * heads, rows, dtype=torch.bool)
    column_any = torch.zeros(batch * heads, ref.shape[-1], dtype=torch.bool) if has_columns else None
    counts = torch.zeros(batch * heads, dtype=torch.int64)
    step = max(1, CHUNK_ELEMENTS // max(1, ref[0, 0].numel()))
    for first in range(0, batch * heads, step):
        part = slice(first, first + step)
        mask = ~torch.isfinite(kernel_slices[part].to(ref.device)) & torch.isfinite(ref_slices[part])
        if exclude_slices is not None:
            mask &= ~exclude_slices[part].to(mask.device)
        counts[part] = mask.reshape(mask.shape[0], -1).sum(dim=1).cpu()
        row_any[part] = (mask.any(dim=-1) if has_columns else mask).cpu()
        if has_columns:
            column_any[part] = mask.any(dim=1).cpu()
    if not counts.any():
        return None
    unflat = lambda x: x.reshape(batch, heads, *x.shape[1:]) if x is not None else None  # noqa: E731
    return Footprint(rows=unflat(row_any), columns=unflat(column_any), counts=unflat(counts))


def name(found: Footprint, g: Geometry) -> tuple[str, str]:
    """(pattern, evidence) naming the region the non-finite elements fill."""
    slices = found.counts > 0
    rows = found.rows[slices].any(dim=0)
    columns = found.columns[slices].any(dim=0) if found.columns is not None else None
    elements = found.counts.numel() * found.rows.shape[-1] * (columns.numel() if columns is not None else 1)
    of_all = f"{found.total} of {elements} elements non-finite"
    if found.total == 1:
        return "one element", f"{of_all}: {_one_element(found, slices, g)}"
    width = int(columns.sum()) if columns is not None else 1
    if found.total == int(slices.sum()) * int(rows.sum()) * width:  # the mask is slices x rows x columns
        if found.total == elements:
            return "every row uniformly", f"{of_all}: every element of every row, not a region"
        return _pattern(slices, rows, columns, g), f"{of_all}, in {_region(slices, rows, columns, g)}"
    if bool(found.rows.all()):
        return "every row uniformly", f"{of_all}, in every {_word(g)} row of every (batch, head) slice"
    return "several regions", f"{of_all}, in {_groups(found, slices, g)}"


def _pattern(slices: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor | None, g: Geometry) -> str:
    """The most specific axis the region is confined on names it."""
    if not bool(rows.all()):
        if int(rows.sum()) == 1:
            return f"one {_word(g)} row"
        return f"{_word(g)} blocks" if _block_size(rows, g) else f"{_word(g)} rows"
    if columns is not None and not bool(columns.all()):
        return "a head-dim tail" if bool(columns[-1]) else "head-dim columns"
    if int(slices.sum()) == 1:
        return "one (batch, head) slice"
    batches, heads = slices.any(dim=1), slices.any(dim=0)
    if int(slices.sum()) == int(batches.sum()) * int(heads.sum()):
        if bool(batches.all()):
            return "one head" if int(heads.sum()) == 1 else "some heads"
        if bool(heads.all()):
            return "one batch" if int(batches.sum()) == 1 else "some batches"
    return "some (batch, head) slices"


def _region(slices: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor | None, g: Geometry) -> str:
    parts = [_rows_text(rows, g)]
    if columns is not None and not bool(columns.all()):
        parts.append(f"head-dim columns {_runs(columns)} of {columns.numel()}")
    return ", ".join(parts) + f" {_slices_text(slices)}"


def _word(g: Geometry) -> str:
    return "key" if g.key_rows else "query"


def _block_size(rows: torch.Tensor, g: Geometry) -> int | None:
    """The block (the kernel's row tile, else the pattern grid) every run of `rows` starts
    and ends on, or None when a run cuts a block or there is only one block."""
    block = g.row_tile or pattern_grid(rows.numel())
    if rows.numel() <= block:
        return None
    for start, stop in _spans(rows):
        if start % block or (stop % block and stop != rows.numel()):
            return None
    return block


def _rows_text(rows: torch.Tensor, g: Geometry) -> str:
    word, length = _word(g), rows.numel()
    if bool(rows.all()):
        return f"every {word} row"
    if int(rows.sum()) == 1:
        return f"{word} row {int(rows.nonzero()[0])} of {length}"
    block = _block_size(rows, g)
    if block is None:
        return f"{word} rows {_runs(rows)} of {length}"
    blocks = -(-length // block)
    in_blocks = torch.nn.functional.pad(rows, (0, blocks * block - length)).reshape(blocks, block).any(dim=1)
    return f"{word} {_plural('block', in_blocks)} {_runs(in_blocks)} of {blocks} ({block} rows each: rows {_runs(rows)} of {length})"


def _slices_text(slices: torch.Tensor) -> str:
    batch, heads = slices.shape
    if bool(slices.all()):
        return "in every head" if batch == 1 else "in every (batch, head) slice"
    in_batches, in_heads = slices.any(dim=1), slices.any(dim=0)
    if int(slices.sum()) != int(in_batches.sum()) * int(in_heads.sum()):
        pairs = [f"({b}, {h})" for b, h in slices.nonzero().tolist()]
        shown = ", ".join(pairs[:RUNS_SHOWN]) + (f", ... ({len(pairs)} in all)" if len(pairs) > RUNS_SHOWN else "")
        return f"(batch, head) slices {shown} of {batch}x{heads}"
    head_part = "every head" if bool(in_heads.all()) else f"{_plural('head', in_heads)} {_runs(in_heads)} of {heads}"
    if batch == 1:
        return f"in {head_part}"
    if bool(in_batches.all()):
        return f"in {head_part} of every batch"
    return f"in {head_part} of {_plural('batch', in_batches)} {_runs(in_batches)} of {batch}"


def _plural(word: str, mask: torch.Tensor) -> str:
    if int(mask.sum()) == 1:
        return word
    return word + ("es" if word.endswith("ch") else "s")


def _one_element(found: Footprint, slices: torch.Tensor, g: Geometry) -> str:
    b, h = slices.nonzero()[0].tolist()
    where = f"batch {b}, head {h}, {_word(g)} row {int(found.rows[b, h].nonzero()[0])}"
    if found.columns is not None:
        where += f", head-dim column {int(found.columns[b, h].nonzero()[0])}"
    return where


def _groups(found: Footprint, slices: torch.Tensor, g: Geometry) -> str:
    """Slices grouped by the rows and columns they hold non-finite elements in."""
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for b, h in slices.nonzero().tolist():
        columns = tuple(found.columns[b, h].tolist()) if found.columns is not None else ()
        groups.setdefault((tuple(found.rows[b, h].tolist()), columns), []).append((b, h))
    texts = []
    for (rows, columns), members in list(groups.items())[:GROUPS_SHOWN]:
        members_mask = torch.zeros_like(slices)
        for b, h in members:
            members_mask[b, h] = True
        texts.append(_region(members_mask, torch.tensor(rows), torch.tensor(columns) if columns else None, g))
    more = f"; and {len(groups) - GROUPS_SHOWN} more groups of slices" if len(groups) > GROUPS_SHOWN else ""
    return "; ".join(texts) + more


def _spans(mask: torch.Tensor) -> list[tuple[int, int]]:
    """[start, stop) of every run of True in a 1-D mask."""
    edges = torch.diff(torch.nn.functional.pad(mask.to(torch.int8), (1, 1))).nonzero().flatten().tolist()
    return list(zip(edges[0::2], edges[1::2]))


def _runs(mask: torch.Tensor) -> str:
    """'0-23, 30' for a mask true at 0..23 and 30."""
    spans = _spans(mask)
    text = ", ".join(str(a) if b - a == 1 else f"{a}-{b - 1}" for a, b in spans[:RUNS_SHOWN])
    return text + (f", ... ({len(spans)} runs, {int(mask.sum())} in all)" if len(spans) > RUNS_SHOWN else "")
