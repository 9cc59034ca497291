"""Piecewise attention forward: one program per (query block, batch x head).

The flash forward's online softmax, with each tile's scores q1 . k1 (signed
distance below the threshold), q2 . k2 (at or above it), or both selected per pair
where the threshold crosses the tile (piecewise_blocks: a loop per kind).  The log-normalizer is stored for the backward pass.
"""

import triton
import triton.language as tl

from .blocks import (
    LOG2_E,
    causal_key_end,
    finished_rows,
    head_offset,
    load_tile,
    program_coordinates,
    store_tile,
    visible,
)
from .head_slices import kept_operand
from .piecewise_blocks import (
    far_keys_end,
    load_pieces,
    near_keys_start,
    near_pairs,
    online_softmax_step,
    part_scores,
    sliced_part_scores,
)


@triton.jit
def attend_piece(q1, q2, acc, row_max, row_sum, row_sum_error, k1_base, k2_base, v_base, rows, dims,
                 first_key, key_stop, stride_q1m, stride_q1d, stride_q2m, stride_q2d,
                 stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
                 seq_q, seq_k, head_dim, dist_threshold, qk_scale,
                 CAUSAL: tl.constexpr, PART: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr,
                 HEAD_CHUNK: tl.constexpr):
    """The online softmax over the key tiles [first_key, key_stop), all of one PART:
    returns the new (acc, row_max, row_sum, row_sum_error).  q1 and q2 are the query
    tiles, or (HEAD_CHUNK) their base pointers (kernels.head_slices)."""
    for key_start in range(first_key, key_stop, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        near = near_pairs(rows, cols, seq_q, seq_k, dist_threshold)
        if HEAD_CHUNK:
            s = sliced_part_scores(q1, q2, rows, stride_q1m, stride_q1d, stride_q2m, stride_q2d, seq_q,
                                   k1_base, k2_base, cols, stride_k1n, stride_k1d, stride_k2n, stride_k2d, seq_k,
                                   near, head_dim, dims.shape[0], HEAD_CHUNK, PART, INTERPRETED)
        else:
            k1, k2 = load_pieces(k1_base, k2_base, cols, dims, stride_k1n, stride_k1d, stride_k2n, stride_k2d,
                                 seq_k, head_dim, PART)
            s = part_scores(q1, k1, q2, k2, near, PART, INTERPRETED)
        s = tl.where(visible(rows, cols, seq_q, seq_k, CAUSAL), s, float("-inf"))
        v = load_tile(v_base, cols, dims, stride_vn, stride_vd, seq_k, head_dim)
        row_max, row_sum, row_sum_error, acc = online_softmax_step(
            s, v, row_max, row_sum, row_sum_error, acc, qk_scale, INTERPRETED)
    return acc, row_max, row_sum, row_sum_error


# Sizes (and the threshold) are not specialised on: one compile per shape family.
@triton.jit(do_not_specialize=["dist_threshold", "num_heads", "group_size", "seq_q", "seq_k",
                               "first_batch_head"])
def piecewise_forward_kernel(
    Q1, K1, Q2, K2, V, O, LSE,
    sm_scale, dist_threshold,
    stride_q1b, stride_q1h, stride_q1m, stride_q1d,
    stride_k1b, stride_k1h, stride_k1n, stride_k1d,
    stride_q2b, stride_q2h, stride_q2m, stride_q2d,
    stride_k2b, stride_k2h, stride_k2n, stride_k2d,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    num_heads, group_size, seq_q, seq_k, head_dim,
    first_batch_head,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr = 0,
):
    block_m, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size,
                                                                    first_batch_head)
    k1_base = K1 + head_offset(batch, kv_head, stride_k1b, stride_k1h)
    k2_base = K2 + head_offset(batch, kv_head, stride_k2b, stride_k2h)
    v_base = V + head_offset(batch, kv_head, stride_vb, stride_vh)

    row_start = block_m * BLOCK_M
    rows = row_start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q1 = kept_operand(Q1 + head_offset(batch, head, stride_q1b, stride_q1h), rows, dims, stride_q1m, stride_q1d,
                      seq_q, head_dim, HEAD_CHUNK)
    q2 = kept_operand(Q2 + head_offset(batch, head, stride_q2b, stride_q2h), rows, dims, stride_q2m, stride_q2d,
                      seq_q, head_dim, HEAD_CHUNK)
    qk_scale = sm_scale * LOG2_E

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_sum_error = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    # Far tiles, then the tiles the threshold crosses, then near ones: the order in which
    # tiles are added is that of one loop over all of them.
    key_end = causal_key_end(row_start + BLOCK_M, seq_q, seq_k, CAUSAL)
    far_end = tl.minimum(far_keys_end(row_start, seq_q, seq_k, dist_threshold, BLOCK_N), key_end)
    near_start = near_keys_start(row_start + BLOCK_M, seq_q, seq_k, dist_threshold, far_end, BLOCK_N)
    acc, row_max, row_sum, row_sum_error = attend_piece(
        q1, q2, acc, row_max, row_sum, row_sum_error, k1_base, k2_base, v_base, rows, dims, 0, far_end,
        stride_q1m, stride_q1d, stride_q2m, stride_q2d,
        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
        seq_q, seq_k, head_dim, dist_threshold, qk_scale, CAUSAL, "far", BLOCK_N, INTERPRETED, HEAD_CHUNK)
    acc, row_max, row_sum, row_sum_error = attend_piece(
        q1, q2, acc, row_max, row_sum, row_sum_error, k1_base, k2_base, v_base, rows, dims,
        far_end, tl.minimum(near_start, key_end),
        stride_q1m, stride_q1d, stride_q2m, stride_q2d,
        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
        seq_q, seq_k, head_dim, dist_threshold, qk_scale, CAUSAL, "both", BLOCK_N, INTERPRETED, HEAD_CHUNK)
    acc, row_max, row_sum, row_sum_error = attend_piece(
        q1, q2, acc, row_max, row_sum, row_sum_error, k1_base, k2_base, v_base, rows, dims, near_start, key_end,
        stride_q1m, stride_q1d, stride_q2m, stride_q2d,
        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
        seq_q, seq_k, head_dim, dist_threshold, qk_scale, CAUSAL, "near", BLOCK_N, INTERPRETED, HEAD_CHUNK)

    out, lse = finished_rows(acc, row_max, row_sum, sm_scale)
    store_tile(O + head_offset(batch, head, stride_ob, stride_oh), out, rows, dims,
               stride_om, stride_od, seq_q, head_dim, INTERPRETED)
    tl.store(LSE + batch_head.to(tl.int64) * seq_q + rows, lse, mask=rows < seq_q)
