"""What localization needs to know about a case and one of its tensors: its axes and tiles.

Every tensor a case is judged on is (batch, heads, rows[, head_dim]): the rows are query
rows (out, lse, dq) or key rows (dk, dv, total). The *other* axis -- key blocks of a query
row, query blocks of a key row -- is reached through key_attribution.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.cases.catalog import Case

# Row axis of each tensor name: key rows for the key-side gradients and the total attention.
_KEY_ROWS = {"dk", "dv", "dk1", "dk2", "total", "cache"}  # cache: kv_cache_attention's, per key position
# Which bundled kernel writes a tensor, by operator and direction (kernels.tuning names);
# its launch config's block_m tiles query rows and block_n key rows.
_WRITER = {
    ("flash_attention", "out"): "fwd", ("flash_attention", "lse"): "fwd",
    ("flash_attention", "total"): "total",
    ("flash_attention", "dq"): "bwd_dq", ("flash_attention", "dk"): "bwd_dkdv",
    ("flash_attention", "dv"): "bwd_dkdv",
    ("piecewise_attention", "out"): "piecewise_fwd",
    ("piecewise_attention", "dq1"): "piecewise_bwd_dq", ("piecewise_attention", "dq2"): "piecewise_bwd_dq",
    ("piecewise_attention", "dk1"): "piecewise_bwd_dkdv", ("piecewise_attention", "dk2"): "piecewise_bwd_dkdv",
    ("piecewise_attention", "dv"): "piecewise_bwd_dkdv",
}
# The fixed grid every tensor is also cut into, whatever its kernel's tiles: 64 rows is the
# most common tile edge of FlashAttention kernels, and it keeps reports comparable.
GRID = 64
# Short problems are also looked at on a finer grid (a 64-grid has two blocks at 128 rows).
FINE_GRID = 16


def pattern_grid(length: int) -> int:
    """The block size fault patterns look at an axis of `length` with: GRID from 8 blocks on."""
    return GRID if length >= 8 * GRID else FINE_GRID


@dataclass(frozen=True)
class Geometry:
    """One tensor of one case: its name, axes and (for the bundled kernels) tile sizes."""

    name: str
    op: str
    batch: int
    heads: int          # heads of this tensor: query heads, or kv heads for key rows
    query_heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    dropout: float
    row_tile: int | None = None    # the writing kernel's tile along this tensor's rows
    other_tile: int | None = None  # ... and along the other axis (keys of a query row)

    @property
    def key_rows(self) -> bool:
        return self.name in _KEY_ROWS

    @property
    def rows(self) -> int:
        return self.seq_k if self.key_rows else self.seq_q

    @property
    def query_tile(self) -> int | None:
        return self.other_tile if self.key_rows else self.row_tile

    @property
    def key_tile(self) -> int | None:
        return self.row_tile if self.key_rows else self.other_tile

    def no_visible_key_rows(self) -> int:
        """Query rows that see no key (bottom-right causal with Sq > Sk): the first Sq - Sk."""
        return max(0, self.seq_q - self.seq_k) if self.causal else 0


def geometry(case: Case, name: str, tiles: tuple[int, int] | None = None) -> Geometry:
    """The geometry of tensor `name` of `case`; `tiles` = (block_m, block_n) of its writer."""
    key_rows = name in _KEY_ROWS
    row_tile = other_tile = None
    if tiles is not None:
        block_m, block_n = tiles
        row_tile, other_tile = (block_n, block_m) if key_rows else (block_m, block_n)
    return Geometry(name=name, op=case.op, batch=case.batch,
                    heads=case.kv_heads if key_rows and name != "total" else case.heads,
                    query_heads=case.heads, kv_heads=case.kv_heads, seq_q=case.seq_q, seq_k=case.seq_k,
                    head_dim=case.head_dim, causal=case.causal, dropout=case.dropout,
                    row_tile=row_tile, other_tile=other_tile)


def bundled_tiles(case: Case, name: str) -> tuple[int, int] | None:
    """(block_m, block_n) the bundled kernel writing `name` launches with for `case` (its
    cfg= configuration or its table's on the current target), or None if none is known."""
    writer = _WRITER.get((case.op, name))
    if writer is None:
        return None
    from conformance.cases.inputs import TORCH_DTYPES
    from conformance.running.configurations import applied
    from conformance.bundled.kernels.launch import padded_head_dim
    from conformance.bundled.kernels.problem import resolve_window, table_choice
    from conformance.bundled.kernels.tuning import launch_config

    # The tables kernels.flash names: the forward's dropout table, else the problem's
    # (a band's, for the forward and the backward kernels); total attention and piecewise, their own.
    _, band = resolve_window(case.window, case.causal, case.seq_q, case.seq_k)
    if writer == "fwd" and case.dropout:
        tables = {"variants": "dropout"}
    else:
        tables = table_choice(band, False) if writer in ("fwd", "bwd_dq", "bwd_dkdv") else {}
    head_dim = padded_head_dim(case.head_dim, TORCH_DTYPES[case.dtype])
    try:
        with applied(case):
            config = launch_config(writer, head_dim, case.dtype, **tables)
    except (KeyError, ValueError):  # a kernel launched from another kernel's table
        return None
    return config.block_m, config.block_n
