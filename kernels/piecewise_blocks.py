"""Triton building blocks of piecewise attention, on top of kernels.blocks.

Piecewise attention (FlagAttention's NLPE operator) scores a (query i, key j)
pair with q2_i . k2_j when pos(i) - j >= dist_threshold ("far") and with
q1_i . k1_j otherwise ("near"), where pos(i) = i + seq_k - seq_q aligns the
queries to the end of the keys, as the causal mask does.  The distance is
signed, as FlagAttention's is: keys after pos(i) are always near.
"""

import triton
import triton.language as tl

from .blocks import mma, narrow, online_softmax_weights, raw_scores


@triton.jit
def near_pairs(rows, cols, seq_q, seq_k, dist_threshold):
    """Mask of the (query row, key col) pairs scored with q1 . k1."""
    distance = rows[:, None] + (seq_k - seq_q) - cols[None, :]
    return distance < dist_threshold


@triton.jit
def piecewise_raw_scores(q1, k1, q2, k2, near, INTERPRETED: tl.constexpr):
    """Unscaled fp32 scores of a tile: q1 @ k1^T on near pairs, q2 @ k2^T on far ones.

    Both products are computed for every tile and selected per pair.  Selecting
    is exact (no arithmetic), so a tile wholly on one side equals the single
    product raw_scores gives, bit for bit.  (Computing under `if` only the
    product a tile needs spilled far more registers in compile probes for
    sm_80/sm_90, e.g. 9.5 KB instead of 0.2 KB for dK/dV at D=128 fp16.)"""
    return tl.where(near, raw_scores(q1, k1, INTERPRETED), raw_scores(q2, k2, INTERPRETED))


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
def band_part(ds, near, NEAR: tl.constexpr, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """The near (NEAR) or far part of dS, zero elsewhere, rounded to the input
    dtype for the product (as the flash backward rounds dS)."""
    if NEAR:
        part = tl.where(near, ds, 0.0)
    else:
        part = tl.where(near, 0.0, ds)
    return narrow(part, dtype, INTERPRETED)
