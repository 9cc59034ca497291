"""Piecewise attention backward: a dK/dV kernel and a dQ kernel (the delta
pre-pass is the flash backward's `delta_kernel`, unchanged).

As in the flash backward, P is rebuilt from the stored log-normalizer and
dS = P (dO . V - delta); dS then splits at the threshold: its near part feeds
dQ1 = scale dS_near K1 and dK1 = scale dS_near^T Q1, its far part dQ2 and dK2.
Every gradient element is owned by one program (no atomics); with GQA a dK/dV
program loops over the query heads sharing its kv head.
"""

import triton
import triton.language as tl

from .blocks import (
    causal_key_end,
    causal_query_start,
    head_offset,
    load_row_stat,
    load_tile,
    mma,
    narrow,
    normalised,
    program_coordinates,
    softmax_gradient,
    store_tile,
    value_gradient,
    visible,
)
from .head_slices import kept_operand, sliced_products
from .piecewise_blocks import (
    band_part,
    far_keys_end,
    far_rows_start,
    load_pieces,
    near_keys_start,
    near_pairs,
    near_rows_end,
    part_scores,
    sliced_part_scores,
)


@triton.jit
def dkdv_piece(dk1, dk2, dv, k1, k2, v, q1_base, q2_base, do_base, lse_base, delta_base, cols, dims,
               first_row, row_stop, stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
               stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
               seq_q, seq_k, head_dim, dist_threshold, sm_scale,
               CAUSAL: tl.constexpr, PART: tl.constexpr, BLOCK_M: tl.constexpr, INTERPRETED: tl.constexpr,
               HEAD_CHUNK: tl.constexpr):
    """dK1, dK2, dV of one key tile, summed over the query tiles [first_row, row_stop),
    all of one PART.  k1, k2 and v are the key tile's, or (HEAD_CHUNK) their base pointers
    (kernels.head_slices)."""
    for row_start in range(first_row, row_stop, BLOCK_M):
        rows = row_start + tl.arange(0, BLOCK_M)
        q1, q2 = load_pieces(q1_base, q2_base, rows, dims, stride_q1m, stride_q1d, stride_q2m, stride_q2d,
                             seq_q, head_dim, PART)
        do = load_tile(do_base, rows, dims, stride_dom, stride_dod, seq_q, head_dim)
        lse = load_row_stat(lse_base, rows, seq_q, float("-inf"))
        delta = load_row_stat(delta_base, rows, seq_q, 0.0)

        near = near_pairs(rows, cols, seq_q, seq_k, dist_threshold)
        if HEAD_CHUNK:
            s = sliced_part_scores(q1_base, q2_base, rows, stride_q1m, stride_q1d, stride_q2m, stride_q2d, seq_q,
                                   k1, k2, cols, stride_k1n, stride_k1d, stride_k2n, stride_k2d, seq_k,
                                   near, head_dim, dims.shape[0], HEAD_CHUNK, PART, INTERPRETED)
            dp = sliced_products(do_base, rows, stride_dom, stride_dod, seq_q, v, cols, stride_vn, stride_vd,
                                 seq_k, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
        else:
            s = part_scores(q1, k1, q2, k2, near, PART, INTERPRETED)
            dp = value_gradient(do, v, INTERPRETED)
        p = tl.where(visible(rows, cols, seq_q, seq_k, CAUSAL), normalised(s, lse[:, None], sm_scale), 0.0)
        dv = mma(tl.trans(narrow(p, do.dtype, INTERPRETED)), do, dv, INTERPRETED)
        ds = softmax_gradient(p, dp, delta[:, None])
        if PART != "far":
            dk1 = mma(tl.trans(band_part(ds, near, True, PART, q1.dtype, INTERPRETED)), q1, dk1, INTERPRETED)
        if PART != "near":
            dk2 = mma(tl.trans(band_part(ds, near, False, PART, q2.dtype, INTERPRETED)), q2, dk2, INTERPRETED)
    return dk1, dk2, dv


@triton.jit
def dq_piece(dq1, dq2, q1, q2, do, lse, delta, k1_base, k2_base, v_base, rows, dims, first_key, key_stop,
             stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
             stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
             seq_q, seq_k, head_dim, dist_threshold, sm_scale,
             CAUSAL: tl.constexpr, PART: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr,
             HEAD_CHUNK: tl.constexpr):
    """dQ1, dQ2 of one query tile, summed over the key tiles [first_key, key_stop), all
    of one PART.  q1, q2 and do are the query tile's, or (HEAD_CHUNK) their base pointers
    (kernels.head_slices)."""
    for key_start in range(first_key, key_stop, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        k1, k2 = load_pieces(k1_base, k2_base, cols, dims, stride_k1n, stride_k1d, stride_k2n, stride_k2d,
                             seq_k, head_dim, PART)
        near = near_pairs(rows, cols, seq_q, seq_k, dist_threshold)
        if HEAD_CHUNK:
            s = sliced_part_scores(q1, q2, rows, stride_q1m, stride_q1d, stride_q2m, stride_q2d, seq_q,
                                   k1_base, k2_base, cols, stride_k1n, stride_k1d, stride_k2n, stride_k2d, seq_k,
                                   near, head_dim, dims.shape[0], HEAD_CHUNK, PART, INTERPRETED)
            dp = sliced_products(do, rows, stride_dom, stride_dod, seq_q, v_base, cols, stride_vn, stride_vd,
                                 seq_k, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
        else:
            v = load_tile(v_base, cols, dims, stride_vn, stride_vd, seq_k, head_dim)
            s = part_scores(q1, k1, q2, k2, near, PART, INTERPRETED)
            dp = value_gradient(do, v, INTERPRETED)
        p = tl.where(visible(rows, cols, seq_q, seq_k, CAUSAL), normalised(s, lse[:, None], sm_scale), 0.0)
        ds = softmax_gradient(p, dp, delta[:, None])
        if PART != "far":
            dq1 = mma(band_part(ds, near, True, PART, k1.dtype, INTERPRETED), k1, dq1, INTERPRETED)
        if PART != "near":
            dq2 = mma(band_part(ds, near, False, PART, k2.dtype, INTERPRETED), k2, dq2, INTERPRETED)
    return dq1, dq2


@triton.jit(do_not_specialize=["dist_threshold", "num_heads", "num_kv_heads", "group_size",
                               "seq_q", "seq_k", "first_batch_head"])
def piecewise_dkdv_kernel(
    Q1, K1, Q2, K2, V, DO, LSE, DELTA, DK1, DK2, DV,
    sm_scale, dist_threshold,
    stride_q1b, stride_q1h, stride_q1m, stride_q1d,
    stride_k1b, stride_k1h, stride_k1n, stride_k1d,
    stride_q2b, stride_q2h, stride_q2m, stride_q2d,
    stride_k2b, stride_k2h, stride_k2n, stride_k2d,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_gb, stride_gh, stride_gn, stride_gd,  # shared by DK1, DK2, DV (one allocation shape)
    num_heads, num_kv_heads, group_size, seq_q, seq_k, head_dim,
    first_batch_head,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr = 0,
):
    block_n, _, batch, kv_head, _ = program_coordinates(num_kv_heads, 1, first_batch_head)
    col_start = block_n * BLOCK_N
    cols = col_start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k1 = kept_operand(K1 + head_offset(batch, kv_head, stride_k1b, stride_k1h), cols, dims, stride_k1n, stride_k1d,
                      seq_k, head_dim, HEAD_CHUNK)
    k2 = kept_operand(K2 + head_offset(batch, kv_head, stride_k2b, stride_k2h), cols, dims, stride_k2n, stride_k2d,
                      seq_k, head_dim, HEAD_CHUNK)
    v = kept_operand(V + head_offset(batch, kv_head, stride_vb, stride_vh), cols, dims, stride_vn, stride_vd,
                     seq_k, head_dim, HEAD_CHUNK)
    dk1 = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dk2 = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)

    # Query tiles near the whole key tile, then those the threshold crosses, then far ones.
    query_start = causal_query_start(col_start, seq_q, seq_k, BLOCK_M, CAUSAL)
    near_end = tl.minimum(near_rows_end(col_start, seq_q, seq_k, dist_threshold, query_start, BLOCK_M), seq_q)
    far_start = far_rows_start(col_start + BLOCK_N, seq_q, seq_k, dist_threshold, near_end, BLOCK_M)
    for member in range(0, group_size):
        head = kv_head * group_size + member
        q1_base = Q1 + head_offset(batch, head, stride_q1b, stride_q1h)
        q2_base = Q2 + head_offset(batch, head, stride_q2b, stride_q2h)
        do_base = DO + head_offset(batch, head, stride_dob, stride_doh)
        stats = (batch * num_heads + head).to(tl.int64) * seq_q
        dk1, dk2, dv = dkdv_piece(
            dk1, dk2, dv, k1, k2, v, q1_base, q2_base, do_base, LSE + stats, DELTA + stats, cols, dims,
            query_start, near_end, stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
            stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "near", BLOCK_M, INTERPRETED, HEAD_CHUNK)
        dk1, dk2, dv = dkdv_piece(
            dk1, dk2, dv, k1, k2, v, q1_base, q2_base, do_base, LSE + stats, DELTA + stats, cols, dims,
            near_end, tl.minimum(far_start, seq_q), stride_q1m, stride_q1d, stride_q2m, stride_q2d,
            stride_dom, stride_dod, stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "both", BLOCK_M,
            INTERPRETED, HEAD_CHUNK)
        dk1, dk2, dv = dkdv_piece(
            dk1, dk2, dv, k1, k2, v, q1_base, q2_base, do_base, LSE + stats, DELTA + stats, cols, dims,
            far_start, seq_q, stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
            stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "far", BLOCK_M, INTERPRETED, HEAD_CHUNK)

    grads = head_offset(batch, kv_head, stride_gb, stride_gh)
    store_tile(DK1 + grads, dk1 * sm_scale, cols, dims, stride_gn, stride_gd, seq_k, head_dim, INTERPRETED)
    store_tile(DK2 + grads, dk2 * sm_scale, cols, dims, stride_gn, stride_gd, seq_k, head_dim, INTERPRETED)
    store_tile(DV + grads, dv, cols, dims, stride_gn, stride_gd, seq_k, head_dim, INTERPRETED)


@triton.jit(do_not_specialize=["dist_threshold", "num_heads", "group_size", "seq_q", "seq_k",
                               "first_batch_head"])
def piecewise_dq_kernel(
    Q1, K1, Q2, K2, V, DO, LSE, DELTA, DQ1, DQ2,
    sm_scale, dist_threshold,
    stride_q1b, stride_q1h, stride_q1m, stride_q1d,
    stride_k1b, stride_k1h, stride_k1n, stride_k1d,
    stride_q2b, stride_q2h, stride_q2m, stride_q2d,
    stride_k2b, stride_k2h, stride_k2n, stride_k2d,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_gb, stride_gh, stride_gm, stride_gd,  # shared by DQ1, DQ2
    num_heads, group_size, seq_q, seq_k, head_dim,
    first_batch_head,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr = 0,
):
    block_m, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size,
                                                                    first_batch_head)
    row_start = block_m * BLOCK_M
    rows = row_start + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q1 = kept_operand(Q1 + head_offset(batch, head, stride_q1b, stride_q1h), rows, dims, stride_q1m, stride_q1d,
                      seq_q, head_dim, HEAD_CHUNK)
    q2 = kept_operand(Q2 + head_offset(batch, head, stride_q2b, stride_q2h), rows, dims, stride_q2m, stride_q2d,
                      seq_q, head_dim, HEAD_CHUNK)
    do = kept_operand(DO + head_offset(batch, head, stride_dob, stride_doh), rows, dims, stride_dom, stride_dod,
                      seq_q, head_dim, HEAD_CHUNK)
    stats = batch_head.to(tl.int64) * seq_q
    lse = load_row_stat(LSE + stats, rows, seq_q, float("-inf"))
    delta = load_row_stat(DELTA + stats, rows, seq_q, 0.0)
    k1_base = K1 + head_offset(batch, kv_head, stride_k1b, stride_k1h)
    k2_base = K2 + head_offset(batch, kv_head, stride_k2b, stride_k2h)
    v_base = V + head_offset(batch, kv_head, stride_vb, stride_vh)
    dq1 = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    dq2 = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    # Far key tiles, then those the threshold crosses, then near ones (as the forward).
    key_end = causal_key_end(row_start + BLOCK_M, seq_q, seq_k, CAUSAL)
    far_end = tl.minimum(far_keys_end(row_start, seq_q, seq_k, dist_threshold, BLOCK_N), key_end)
    near_start = near_keys_start(row_start + BLOCK_M, seq_q, seq_k, dist_threshold, far_end, BLOCK_N)
    dq1, dq2 = dq_piece(dq1, dq2, q1, q2, do, lse, delta, k1_base, k2_base, v_base, rows, dims, 0, far_end,
                        stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
                        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
                        seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "far", BLOCK_N, INTERPRETED,
                        HEAD_CHUNK)
    dq1, dq2 = dq_piece(dq1, dq2, q1, q2, do, lse, delta, k1_base, k2_base, v_base, rows, dims,
                        far_end, tl.minimum(near_start, key_end),
                        stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
                        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
                        seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "both", BLOCK_N, INTERPRETED,
                        HEAD_CHUNK)
    dq1, dq2 = dq_piece(dq1, dq2, q1, q2, do, lse, delta, k1_base, k2_base, v_base, rows, dims, near_start, key_end,
                        stride_q1m, stride_q1d, stride_q2m, stride_q2d, stride_dom, stride_dod,
                        stride_k1n, stride_k1d, stride_k2n, stride_k2d, stride_vn, stride_vd,
                        seq_q, seq_k, head_dim, dist_threshold, sm_scale, CAUSAL, "near", BLOCK_N, INTERPRETED,
                        HEAD_CHUNK)

    grads = head_offset(batch, head, stride_gb, stride_gh)
    store_tile(DQ1 + grads, dq1 * sm_scale, rows, dims, stride_gm, stride_gd, seq_q, head_dim, INTERPRETED)
    store_tile(DQ2 + grads, dq2 * sm_scale, rows, dims, stride_gm, stride_gd, seq_q, head_dim, INTERPRETED)
