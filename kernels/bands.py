"""Sliding-window attention: which (query, key) pairs a window lets through, and which
tiles a program must visit at all.

FlashAttention-2's window (left, right), bottom-right aligned like the causal mask:
query i sees key j iff

    i + (Sk - Sq) - left  <=  j  <=  i + (Sk - Sq) + right.

The kernels get the window already resolved by the host (kernels.problem): both bounds
finite and >= 0 (an unbounded side is a bound past every key, causal is right = 0), so
the band is two integer comparisons.  A window that is only causal, or no window at
all, never comes here: those run the plain kernels (blocks.visible, off_band_end, ...).

Cost grows with the band, not with Sk: each program visits only the tiles some row (or,
in the dK/dV kernel, some key) of its tile can see, and among those runs the tiles that
every row sees whole without a mask, as the causal kernels do off the diagonal.  Every
helper returns tile bounds as (first, unmasked_start, unmasked_end, end): one loop runs the
tiles [first, end) in ascending order, and masks only those outside [unmasked_start,
unmasked_end) (masked_at_band_edges).  first, unmasked_start and unmasked_end are
multiples of the tile size (or equal to end, where no tile follows).
"""

import triton
import triton.language as tl

from .blocks import visible


@triton.jit
def visible_pairs(rows, cols, seq_q, seq_k, window_left, window_right,
                  CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """blocks.visible (inside both sequences; causal), and with WINDOW inside the band."""
    mask = visible(rows, cols, seq_q, seq_k, CAUSAL)
    if WINDOW:
        diagonal = rows[:, None] + (seq_k - seq_q)
        mask = mask & (cols[None, :] >= diagonal - window_left) & (cols[None, :] <= diagonal + window_right)
    return mask


@triton.jit
def masked_at_band_edges(x, fill, tile_start, whole_start, whole_end, rows, cols, seq_q, seq_k,
                         window_left, window_right, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """x with `fill` at the pairs visible_pairs hides, where the tile starting at tile_start
    lies outside [whole_start, whole_end) (the tiles every row or key sees whole: the
    unmasked span of window_key_tiles / window_query_tiles); x itself inside it.  What a
    window's single loop over its band masks with: the branch is uniform over the program,
    so the tiles inside skip the mask's comparisons."""
    if (tile_start < whole_start) | (tile_start >= whole_end):
        x = tl.where(visible_pairs(rows, cols, seq_q, seq_k, window_left, window_right, CAUSAL, WINDOW), x, fill)
    return x


@triton.jit
def _ordered(first, unmasked_start, unmasked_end, end):
    """Clamp the unmasked span into [first, end] (empty where there is none), and end >= first."""
    end = tl.maximum(end, first)
    unmasked_start = tl.minimum(tl.maximum(unmasked_start, first), end)
    unmasked_end = tl.minimum(tl.maximum(unmasked_end, unmasked_start), end)
    return first, unmasked_start, unmasked_end, end


@triton.jit
def window_key_tiles(row_start, seq_q, seq_k, window_left, window_right,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key bounds of the query tile [row_start, row_start + BLOCK_M) (forward, dQ):
    (first, unmasked_start, unmasked_end, end), see the module doc.

    The band of a row slides right by one key per row, so the tile's keys run from its
    first row's left edge to its last row's right edge, and the keys every row sees lie
    between its last row's left edge and its first row's right edge.  Rows past seq_q
    (the ragged last tile) are left out: nothing of theirs is stored, and in the dQ
    kernel their log-normalizer of -inf zeroes their probabilities."""
    offset = seq_k - seq_q
    last_row = tl.minimum(row_start + BLOCK_M, seq_q) - 1
    first = (tl.maximum(row_start + offset - window_left, 0) // BLOCK_N) * BLOCK_N
    end = tl.minimum(last_row + offset + window_right + 1, seq_k)
    whole_from = tl.maximum(last_row + offset - window_left, 0)
    whole_to = tl.minimum(row_start + offset + window_right + 1, seq_k)  # also keeps out the ragged key tile
    unmasked_start = tl.cdiv(whole_from, BLOCK_N) * BLOCK_N
    unmasked_end = (tl.maximum(whole_to, 0) // BLOCK_N) * BLOCK_N
    return _ordered(first, unmasked_start, unmasked_end, end)


@triton.jit
def window_query_tiles(col_start, seq_q, seq_k, window_left, window_right,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Query-row bounds of the key tile [col_start, col_start + BLOCK_N) (dK/dV, total
    attention): (first, unmasked_start, unmasked_end, end), see the module doc.

    Key j is seen by rows j - (Sk - Sq) - right .. j - (Sk - Sq) + left.  The unmasked
    rows see every key of the tile and lie inside seq_q (their loads are not bounded);
    the ragged last key tile, whose padding keys only a mask keeps out, has none."""
    offset = seq_k - seq_q
    last_col = tl.minimum(col_start + BLOCK_N, seq_k) - 1
    first = (tl.maximum(col_start - offset - window_right, 0) // BLOCK_M) * BLOCK_M
    end = tl.minimum(last_col - offset + window_left + 1, seq_q)
    whole_from = tl.maximum(col_start + BLOCK_N - 1 - offset - window_right, 0)
    whole_to = tl.minimum(col_start - offset + window_left + 1, seq_q)
    unmasked_start = tl.cdiv(whole_from, BLOCK_M) * BLOCK_M
    unmasked_end = (tl.maximum(whole_to, 0) // BLOCK_M) * BLOCK_M
    unmasked_end = tl.where(col_start + BLOCK_N <= seq_k, unmasked_end, unmasked_start)
    return _ordered(first, unmasked_start, unmasked_end, end)
