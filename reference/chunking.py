"""How to cut an attention problem into blocks whose score matrices fit a memory budget.

The unit of work is one (batch, kv head) pair with all ``group`` query heads that share it, so a
GQA group is one batched matmul against its kv head, with no copies of K or V. A block is a
range of units times a range of query rows, always against all Sk keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Tuple

DEFAULT_MAX_CHUNK_BYTES = 512 * 2**20

# Score-sized tensors alive at once in the backward (S/P, dP/dS, a rounded copy of P or dS, and
# a matmul workspace); the forward needs fewer, so one constant serves both.
LIVE_SCORE_BLOCKS = 4


@dataclass(frozen=True)
class ChunkPlan:
    """Block sizes: ``units`` (batch, kv head) pairs by ``rows`` query rows per block."""

    units: int
    rows: int


def plan_chunks(
    n_units: int, group: int, sq: int, sk: int, elem_bytes: int, max_chunk_bytes: int, extra_blocks: int = 0
) -> ChunkPlan:
    """Largest blocks whose score tensors (``LIVE_SCORE_BLOCKS`` of them, plus ``extra_blocks``
    for a computation that keeps more alive) fit ``max_chunk_bytes``.

    Rows are filled first (a whole unit's rows if they fit), then more units. The smallest block
    is one unit by one row (``group`` x 1 x Sk scores), used even if it exceeds the budget.
    """
    bytes_per_unit_row = max(1, group * sk * elem_bytes * (LIVE_SCORE_BLOCKS + extra_blocks))
    unit_rows = max(1, max_chunk_bytes // bytes_per_unit_row)
    rows = max(1, min(sq, unit_rows))
    units = max(1, min(n_units, unit_rows // rows))
    return ChunkPlan(units=units, rows=rows)


def spans(total: int, step: int) -> Iterator[Tuple[int, int]]:
    """Half-open ranges ``(start, stop)`` covering ``range(total)`` in steps of ``step``."""
    for start in range(0, total, step):
        yield start, min(start + step, total)
