"""Triton building blocks of piecewise attention, on top of kernels.blocks.

Piecewise attention (FlagAttention's NLPE operator) scores a (query i, key j)
pair with q2_i . k2_j when pos(i) - j >= dist_threshold ("far") and with
q1_i . k1_j otherwise ("near"), where pos(i) = i + seq_k - seq_q aligns the
queries to the end of the keys, as the causal mask does.  The distance is
signed, as FlagAttention's is: keys after pos(i) are always near.

Tiles fall into three kinds, and each kind's loop does only the products it needs
(FlagAttention's separate near and far key ranges): "far" tiles, every pair at
distance >= the threshold, take q2 . k2 alone; "near" tiles take q1 . k1 alone;
"both" tiles, which the threshold crosses, take both products and select per pair.
The kind is a compile-time PART ("near", "far", "both").  Selecting is exact, so a
one-product tile equals what the "both" path gives it, bit for bit.
"""

import triton
import triton.language as tl

from .blocks import load_tile, mma, narrow, online_softmax_weights, raw_scores
from .head_slices import sliced_products


@triton.jit
def near_pairs(rows, cols, seq_q, seq_k, dist_threshold):
    """Mask of the (query row, key col) pairs scored with q1 . k1."""
    distance = rows[:, None] + (seq_k - seq_q) - cols[None, :]
    return distance < dist_threshold


@triton.jit
def piecewise_raw_scores(q1, k1, q2, k2, near, INTERPRETED: tl.constexpr):
    """Unscaled fp32 scores of a tile: q1 @ k1^T on near pairs, q2 @ k2^T on far ones.

    Both products are computed and selected per pair: the "both" tiles' path.  (Picking
    the product a tile needs with a run-time `if` inside one loop spilled far more
    registers in compile probes for sm_80/sm_90, e.g. 9.5 KB instead of 0.2 KB for dK/dV
    at D=128 fp16; the kinds have separate loops instead.)"""
    return tl.where(near, raw_scores(q1, k1, INTERPRETED), raw_scores(q2, k2, INTERPRETED))


@triton.jit
def far_keys_end(row_start, seq_q, seq_k, dist_threshold, BLOCK_N: tl.constexpr):
    """End (a multiple of BLOCK_N) of the key tiles [0, end) far from every row >= row_start:
    key j is far from row i iff j <= i + (seq_k - seq_q) - dist_threshold.  With a
    non-negative threshold such a key is inside the keys and, causal or not, visible."""
    end = tl.maximum(row_start + (seq_k - seq_q) - dist_threshold + 1, 0)
    return (end // BLOCK_N) * BLOCK_N


@triton.jit
def near_keys_start(row_end, seq_q, seq_k, dist_threshold, far_end, BLOCK_N: tl.constexpr):
    """Start (a multiple of BLOCK_N, at least far_end) of the key tiles near every row
    < row_end: key j is near row i iff j > i + (seq_k - seq_q) - dist_threshold."""
    start = tl.maximum(row_end + (seq_k - seq_q) - dist_threshold, 0)
    return tl.maximum(tl.cdiv(start, BLOCK_N) * BLOCK_N, far_end)


@triton.jit
def near_rows_end(col_start, seq_q, seq_k, dist_threshold, first_row, BLOCK_M: tl.constexpr):
    """The dK/dV mirror of near_keys_start: end (a multiple of BLOCK_M, at least first_row)
    of the query tiles whose every row is near every key >= col_start."""
    end = tl.maximum(col_start - (seq_k - seq_q) + dist_threshold, 0)
    return tl.maximum((end // BLOCK_M) * BLOCK_M, first_row)


@triton.jit
def far_rows_start(col_end, seq_q, seq_k, dist_threshold, near_end, BLOCK_M: tl.constexpr):
    """The dK/dV mirror of far_keys_end: start (a multiple of BLOCK_M, at least near_end)
    of the query tiles whose every row is far from every key < col_end."""
    start = tl.maximum(col_end - 1 - (seq_k - seq_q) + dist_threshold, 0)
    return tl.maximum(tl.cdiv(start, BLOCK_M) * BLOCK_M, near_end)


@triton.jit
def load_pieces(base1, base2, rows, dims, stride1_row, stride1_col, stride2_row, stride2_col,
                n_rows, n_cols, PART: tl.constexpr):
    """The tiles (of q1/q2 or k1/k2) that a PART's products read.  A part that needs one
    of them gets the other as an alias of it: never read, so it costs nothing."""
    if PART == "near":
        tile1 = load_tile(base1, rows, dims, stride1_row, stride1_col, n_rows, n_cols)
        tile2 = tile1
    elif PART == "far":
        tile2 = load_tile(base2, rows, dims, stride2_row, stride2_col, n_rows, n_cols)
        tile1 = tile2
    else:
        tile1 = load_tile(base1, rows, dims, stride1_row, stride1_col, n_rows, n_cols)
        tile2 = load_tile(base2, rows, dims, stride2_row, stride2_col, n_rows, n_cols)
    return tile1, tile2


@triton.jit
def part_scores(q1, k1, q2, k2, near, PART: tl.constexpr, INTERPRETED: tl.constexpr):
    """Unscaled fp32 scores of a PART's tile (near: q1 . k1, far: q2 . k2, both: selected)."""
    if PART == "near":
        s = raw_scores(q1, k1, INTERPRETED)
    elif PART == "far":
        s = raw_scores(q2, k2, INTERPRETED)
    else:
        s = piecewise_raw_scores(q1, k1, q2, k2, near, INTERPRETED)
    return s


@triton.jit
def sliced_part_scores(q1, q2, rows, stride_q1m, stride_q1d, stride_q2m, stride_q2d, q_bound,
                       k1, k2, cols, stride_k1n, stride_k1d, stride_k2n, stride_k2d, k_bound,
                       near, head_dim, BLOCK_D: tl.constexpr, HEAD_CHUNK: tl.constexpr,
                       PART: tl.constexpr, INTERPRETED: tl.constexpr):
    """part_scores of operands read from memory HEAD_CHUNK columns at a time: q1, q2, k1, k2
    are the tiles' base pointers (kernels.head_slices), row bounds q_bound and k_bound."""
    if PART != "far":
        s1 = sliced_products(q1, rows, stride_q1m, stride_q1d, q_bound, k1, cols, stride_k1n, stride_k1d,
                             k_bound, head_dim, BLOCK_D, HEAD_CHUNK, INTERPRETED)
    if PART != "near":
        s2 = sliced_products(q2, rows, stride_q2m, stride_q2d, q_bound, k2, cols, stride_k2n, stride_k2d,
                             k_bound, head_dim, BLOCK_D, HEAD_CHUNK, INTERPRETED)
    if PART == "near":
        s = s1
    elif PART == "far":
        s = s2
    else:
        s = tl.where(near, s1, s2)
    return s


@triton.jit
def online_softmax_step(s, v, row_max, row_sum, row_sum_error, acc, qk_scale,
                        INTERPRETED: tl.constexpr):
    """Fold one tile of masked (-inf) unscaled scores s and its values v into the
    online-softmax state (running max, Kahan-compensated running sum, fp32 acc),
    with the flash forward's arithmetic in its order, so a piecewise tile wholly
    inside or outside the band reproduces flash_attention bit for bit."""
    p, rescale, row_max, row_sum, row_sum_error = online_softmax_weights(
        s, row_max, row_sum, row_sum_error, qk_scale)
    acc = mma(narrow(p, v.dtype, INTERPRETED), v, acc * rescale[:, None], INTERPRETED)
    return row_max, row_sum, row_sum_error, acc


@triton.jit
def band_part(ds, near, NEAR: tl.constexpr, PART: tl.constexpr, dtype: tl.constexpr,
              INTERPRETED: tl.constexpr):
    """The near (NEAR) or far part of dS, zero elsewhere, rounded to the input dtype for
    the product (as the flash backward rounds dS).  A one-product PART's tile is all of
    one kind: no selection."""
    if PART != "both":
        part = ds
    elif NEAR:
        part = tl.where(near, ds, 0.0)
    else:
        part = tl.where(near, 0.0, ds)
    return narrow(part, dtype, INTERPRETED)
