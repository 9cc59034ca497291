"""FlashAttention-2 backward: a delta pre-pass, a dK/dV kernel and a dQ kernel.

Splitting dQ into its own kernel (as FlagAttention v0.2 does) means every
gradient element is owned by exactly one program: no atomics, deterministic
results, at the price of recomputing the probabilities twice.

    delta_i = sum_d dO_id * O_id                       (pre-pass, fp32)
    P_ij    = exp(s_ij - lse_i)                          (recomputed)
    dV_j    = sum_i P_ij dO_i
    dS_ij   = P_ij (dO_i . V_j - delta_i)
    dK_j    = sm_scale sum_i dS_ij Q_i
    dQ_i    = sm_scale sum_j dS_ij K_j

With GQA, one dK/dV program owns a kv head and loops over the query heads that
share it, so the sum over the group happens in registers.  (Computing the dK/dV
tiles transposed, P^T = K Q^T, as the Triton tutorial does, so that P^T dO needs no
transpose of a register tile, made that kernel 15-23 % slower on an H100 with triton
3.6: 11.1 against 9.0 ms at D = 128, S = 8192, benchmarks/profile_backward.py.)

Both kernels split their loop as the forward does: the tiles that need a mask (the
causal diagonal band, the ragged ends) run apart from the unmasked rest, in the same
order, so the split changes no sum.

With dropout (keep mask Z, keep_scale c = 1/(1-p)), the forward computed
O = c (Z*P) V, so dV_j = c sum_i Z_ij P_ij dO_i (c applied once to the fp32
accumulator, as in the forward), dP_ij = c Z_ij dO_i . V_j, and delta_i =
dO_i . O_i is still sum_j P_ij dP_ij: the softmax backward is unchanged.

With a softcap, s = c tanh(sm_scale q.k / c): dS above is the gradient of s, and the
chain rule through the cap multiplies it by 1 - tanh^2 (kernels.scores) before it is
rounded for the dK and dQ products.  ALiBi adds a constant to s (no gradient of its
own), a window or a packed batch only chooses which pairs there are (kernels.bands,
kernels.sequences): the loops are the dense ones, over fewer tiles.
"""

import triton
import triton.language as tl

from .bands import masked_at_band_edges, window_key_tiles, window_query_tiles
from .blocks import (
    causal_key_end,
    causal_query_start,
    first_unmasked_row,
    head_offset,
    load_head_tile,
    load_row_stat,
    load_rows,
    mma,
    narrow,
    off_band_end,
    program_coordinates,
    raw_scores,
    softmax_gradient,
    store_tile,
    tile_source,
    value_gradient,
)
from .dropout import dropout_keep, dropped_value_gradient
from .head_slices import kept_operand, sliced_products
from .scores import head_slope, probabilities, through_softcap
from .sequences import at_token, row_stats, sequence_span, streamed_rows


# As in the forward, sizes are not specialised on (one compile per shape family).
@triton.jit(do_not_specialize=["num_heads", "seq_q", "first_batch_head", "total_q"])
def delta_kernel(
    O, DO, DELTA,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    num_heads, seq_q, head_dim,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    first_batch_head=0,  # last, with a default: piecewise attention launches it too
    CU_SEQLENS_Q=None, total_q=None, VARLEN: tl.constexpr = False,  # varlen (kernels.sequences)
    TILES=None,  # a packed batch's tile list (kernels.packed_tiles)
):
    block_m, batch_head, batch, head, _ = program_coordinates(num_heads, 1, first_batch_head, TILES=TILES)
    q_start = 0
    if VARLEN:
        q_start, seq_q = sequence_span(CU_SEQLENS_Q, batch)
        if block_m * BLOCK_M >= seq_q:
            return  # past this sequence's last query tile
        O = at_token(O, q_start, stride_om)
        DO = at_token(DO, q_start, stride_dom)
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    o = load_head_tile(O, batch, head, stride_ob, stride_oh, rows, dims, stride_om, stride_od, seq_q, head_dim)
    do = load_head_tile(DO, batch, head, stride_dob, stride_doh,
                        rows, dims, stride_dom, stride_dod, seq_q, head_dim)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(row_stats(DELTA, batch_head, head, seq_q, q_start, total_q, VARLEN) + rows, delta, mask=rows < seq_q)


@triton.jit
def dkdv_over_rows(dk, dv, k, v, q_source, do_source, lse_base, delta_base, cols, dims, col_start,
                   row_first, row_stop, stride_qm, stride_qd, stride_dom, stride_dod,
                   stride_kn, stride_kd, stride_vn, stride_vd,
                   seq_q, seq_k, head_dim, sm_scale, seed_lo, seed_hi, drop_threshold, keep_scale,
                   batch_head, window_left, window_right, softcap, alibi_slope,
                   CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
                   DROPOUT: tl.constexpr, MASKED: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                   DESCRIPTORS: tl.constexpr, INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr,
                   whole_start=0, whole_end=0, EDGES_ONLY: tl.constexpr = False):
    """Add the query tiles [row_first, row_stop) of one head to the fp32 dK, dV of a key
    tile: returns (dk, dv).  MASKED=False: every pair visible and every row inside seq_q
    (no mask, no bound check on the rows).  k and v are the key tile's K and V, or
    (HEAD_CHUNK) their base pointers (kernels.head_slices)."""
    for row_start in tl.range(row_first, row_stop, BLOCK_M, num_stages=STAGES):
        rows = row_start + tl.arange(0, BLOCK_M)
        query_rows = seq_q if MASKED else None  # None: no bound check (blocks.below)
        q = load_rows(q_source, row_start, rows, dims, stride_qm, stride_qd, query_rows, head_dim, DESCRIPTORS)
        do = load_rows(do_source, row_start, rows, dims, stride_dom, stride_dod, query_rows, head_dim, DESCRIPTORS)
        lse = load_row_stat(lse_base, rows, query_rows, float("-inf"))
        delta = load_row_stat(delta_base, rows, query_rows, 0.0)

        if HEAD_CHUNK:
            raw = sliced_products(q_source, rows, stride_qm, stride_qd, query_rows, k, cols, stride_kn, stride_kd,
                                  seq_k, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
            dp = sliced_products(do_source, rows, stride_dom, stride_dod, query_rows, v, cols, stride_vn, stride_vd,
                                 seq_k, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
        else:
            raw = raw_scores(q, k, INTERPRETED)
            dp = value_gradient(do, v, INTERPRETED)
        p, cap_slope = probabilities(raw, lse, rows, cols, seq_q, seq_k, sm_scale, window_left, window_right,
                                     softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI, MASKED and not EDGES_ONLY)
        if EDGES_ONLY:
            p = masked_at_band_edges(p, 0.0, row_start, whole_start, whole_end, rows, cols, seq_q, seq_k,
                                     window_left, window_right, CAUSAL, WINDOW)
        p_used = p  # the weights as they multiplied V in the forward
        if DROPOUT:
            keep = dropout_keep(seed_lo, seed_hi, drop_threshold, batch_head, rows, col_start, BLOCK_N)
            p_used = tl.where(keep, p, 0.0)
            dp = dropped_value_gradient(dp, keep, keep_scale)
        dv = mma(tl.trans(narrow(p_used, do.dtype, INTERPRETED)), do, dv, INTERPRETED)
        ds = through_softcap(softmax_gradient(p, dp, delta[:, None]), cap_slope, SOFTCAP)
        # dS is rounded to the input dtype for the product, like P in the forward.
        dk = mma(tl.trans(narrow(ds, q.dtype, INTERPRETED)), q, dk, INTERPRETED)
    return dk, dv


# The variant arguments and flags as in the forward (kernels.flash_forward).
@triton.jit(do_not_specialize=["num_heads", "num_kv_heads", "group_size", "seq_q", "seq_k",
                               "seed_lo", "seed_hi", "drop_threshold", "first_batch_head",
                               "total_q", "window_left", "window_right"])
def dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    num_heads, num_kv_heads, group_size, seq_q, seq_k, head_dim,
    seed_lo, seed_hi, drop_threshold, keep_scale,
    CU_SEQLENS_Q, CU_SEQLENS_K, total_q, window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b,
    first_batch_head,
    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr, INTERPRETED: tl.constexpr,
    VARLEN: tl.constexpr = False, WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, HEAD_CHUNK: tl.constexpr = 0,
    TILES=None,  # a packed batch's tile list (kernels.packed_tiles)
):
    block_n, _, batch, kv_head, _ = program_coordinates(num_kv_heads, 1, first_batch_head, TILES=TILES)
    col_start = block_n * BLOCK_N
    q_start = 0
    if VARLEN:
        q_start, seq_q = sequence_span(CU_SEQLENS_Q, batch)
        k_start, seq_k = sequence_span(CU_SEQLENS_K, batch)
        if col_start >= seq_k:
            return  # past this sequence's last key tile
        Q = at_token(Q, q_start, stride_qm)
        DO = at_token(DO, q_start, stride_dom)
        K = at_token(K, k_start, stride_kn)
        V = at_token(V, k_start, stride_vn)
        DK = at_token(DK, k_start, stride_dkn)
        DV = at_token(DV, k_start, stride_dvn)
    cols = col_start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k = kept_operand(K + head_offset(batch, kv_head, stride_kb, stride_kh), cols, dims, stride_kn, stride_kd,
                     seq_k, head_dim, HEAD_CHUNK)
    v = kept_operand(V + head_offset(batch, kv_head, stride_vb, stride_vh), cols, dims, stride_vn, stride_vd,
                     seq_k, head_dim, HEAD_CHUNK)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)

    # Query tiles in order.  With a window, one loop over the band's rows, those at its edges
    # masked (kernels.bands.masked_at_band_edges; why one loop: the forward's comment).
    # Without: the causal band (masked), the rows that see the whole key tile (unmasked),
    # the ragged last query tile (masked).
    if WINDOW:
        query_start, whole_start, whole_end, rows_end = window_query_tiles(
            col_start, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
    else:
        query_start = causal_query_start(col_start, seq_q, seq_k, BLOCK_M, CAUSAL)
        unmasked_start = first_unmasked_row(col_start, seq_q, seq_k, BLOCK_M, BLOCK_N, CAUSAL)
        full_rows_end = (seq_q // BLOCK_M) * BLOCK_M
        tail_start = tl.maximum(unmasked_start, full_rows_end)
    for member in range(0, group_size):
        head = kv_head * group_size + member
        q_source = tile_source(Q + head_offset(batch, head, stride_qb, stride_qh),
                               streamed_rows(seq_q, VARLEN), head_dim, stride_qm, BLOCK_M, BLOCK_D, DESCRIPTORS)
        do_source = tile_source(DO + head_offset(batch, head, stride_dob, stride_doh),
                                streamed_rows(seq_q, VARLEN), head_dim, stride_dom, BLOCK_M, BLOCK_D, DESCRIPTORS)
        batch_head = batch * num_heads + head
        lse_base = row_stats(LSE, batch_head, head, seq_q, q_start, total_q, VARLEN)
        delta_base = row_stats(DELTA, batch_head, head, seq_q, q_start, total_q, VARLEN)
        alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, head, ALIBI)
        if WINDOW:
            dk, dv = dkdv_over_rows(
                dk, dv, k, v, q_source, do_source, lse_base, delta_base, cols, dims, col_start,
                query_start, rows_end, stride_qm, stride_qd, stride_dom, stride_dod,
                stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, sm_scale, seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                DROPOUT, True, BLOCK_M, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK,
                whole_start, whole_end, True)
        else:
            dk, dv = dkdv_over_rows(
                dk, dv, k, v, q_source, do_source, lse_base, delta_base, cols, dims, col_start,
                query_start, tl.minimum(unmasked_start, seq_q), stride_qm, stride_qd, stride_dom, stride_dod,
                stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, sm_scale, seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                DROPOUT, True, BLOCK_M, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)
            dk, dv = dkdv_over_rows(
                dk, dv, k, v, q_source, do_source, lse_base, delta_base, cols, dims, col_start,
                unmasked_start, full_rows_end, stride_qm, stride_qd, stride_dom, stride_dod,
                stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, sm_scale, seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                DROPOUT, False, BLOCK_M, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)
            dk, dv = dkdv_over_rows(
                dk, dv, k, v, q_source, do_source, lse_base, delta_base, cols, dims, col_start,
                tail_start, seq_q, stride_qm, stride_qd, stride_dom, stride_dod,
                stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, sm_scale, seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                DROPOUT, True, BLOCK_M, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)

    store_tile(DK + head_offset(batch, kv_head, stride_dkb, stride_dkh),
               dk * sm_scale, cols, dims, stride_dkn, stride_dkd, seq_k, head_dim, INTERPRETED)
    if DROPOUT:
        dv = dv * keep_scale
    store_tile(DV + head_offset(batch, kv_head, stride_dvb, stride_dvh),
               dv, cols, dims, stride_dvn, stride_dvd, seq_k, head_dim, INTERPRETED)


@triton.jit
def dq_over_keys(dq, q, do, lse, delta, k_source, v_source, rows, dims, key_first, key_stop,
                 stride_qm, stride_qd, stride_dom, stride_dod,
                 stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, sm_scale,
                 seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                 window_left, window_right, softcap, alibi_slope,
                 CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
                 DROPOUT: tl.constexpr, MASKED: tl.constexpr,
                 BLOCK_N: tl.constexpr, STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr,
                 INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr,
                 whole_start=0, whole_end=0, EDGES_ONLY: tl.constexpr = False):
    """Add the key tiles [key_first, key_stop) to the fp32 dQ of a query tile.
    MASKED=False: every pair visible and every key inside seq_k.  q and do are the
    query tile's Q and dO, or (HEAD_CHUNK) their base pointers (kernels.head_slices)."""
    for key_start in tl.range(key_first, key_stop, BLOCK_N, num_stages=STAGES):
        cols = key_start + tl.arange(0, BLOCK_N)
        key_rows = seq_k if MASKED else None  # None: no bound check (blocks.below)
        k = load_rows(k_source, key_start, cols, dims, stride_kn, stride_kd, key_rows, head_dim, DESCRIPTORS)
        if HEAD_CHUNK:
            raw = sliced_products(q, rows, stride_qm, stride_qd, seq_q, k_source, cols, stride_kn, stride_kd,
                                  key_rows, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
            dp = sliced_products(do, rows, stride_dom, stride_dod, seq_q, v_source, cols, stride_vn, stride_vd,
                                 key_rows, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
        else:
            v = load_rows(v_source, key_start, cols, dims, stride_vn, stride_vd, key_rows, head_dim, DESCRIPTORS)
            raw = raw_scores(q, k, INTERPRETED)
            dp = value_gradient(do, v, INTERPRETED)
        p, cap_slope = probabilities(raw, lse, rows, cols, seq_q, seq_k, sm_scale, window_left, window_right,
                                     softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI, MASKED and not EDGES_ONLY)
        if EDGES_ONLY:
            p = masked_at_band_edges(p, 0.0, key_start, whole_start, whole_end, rows, cols, seq_q, seq_k,
                                     window_left, window_right, CAUSAL, WINDOW)
        if DROPOUT:
            keep = dropout_keep(seed_lo, seed_hi, drop_threshold, batch_head, rows, key_start, BLOCK_N)
            dp = dropped_value_gradient(dp, keep, keep_scale)
        ds = through_softcap(softmax_gradient(p, dp, delta[:, None]), cap_slope, SOFTCAP)
        dq = mma(narrow(ds, k.dtype, INTERPRETED), k, dq, INTERPRETED)
    return dq


@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k",
                               "seed_lo", "seed_hi", "drop_threshold", "first_batch_head",
                               "total_q", "window_left", "window_right"])
def dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    num_heads, group_size, seq_q, seq_k, head_dim,
    seed_lo, seed_hi, drop_threshold, keep_scale,
    CU_SEQLENS_Q, CU_SEQLENS_K, total_q, window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b,
    first_batch_head,
    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr, INTERPRETED: tl.constexpr,
    VARLEN: tl.constexpr = False, WINDOW: tl.constexpr = False,
    SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False, HEAD_CHUNK: tl.constexpr = 0,
    TILES=None,  # a packed batch's tile list (kernels.packed_tiles)
):
    block_m, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size, first_batch_head,
                                                                    LAST_BLOCK_FIRST=True, TILES=TILES)
    q_start = 0
    if VARLEN:
        q_start, seq_q = sequence_span(CU_SEQLENS_Q, batch)
        k_start, seq_k = sequence_span(CU_SEQLENS_K, batch)
        if block_m * BLOCK_M >= seq_q:
            return  # past this sequence's last query tile
        Q = at_token(Q, q_start, stride_qm)
        DO = at_token(DO, q_start, stride_dom)
        DQ = at_token(DQ, q_start, stride_dqm)
        K = at_token(K, k_start, stride_kn)
        V = at_token(V, k_start, stride_vn)
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = kept_operand(Q + head_offset(batch, head, stride_qb, stride_qh), rows, dims, stride_qm, stride_qd,
                     seq_q, head_dim, HEAD_CHUNK)
    do = kept_operand(DO + head_offset(batch, head, stride_dob, stride_doh), rows, dims, stride_dom, stride_dod,
                      seq_q, head_dim, HEAD_CHUNK)
    lse = load_row_stat(row_stats(LSE, batch_head, head, seq_q, q_start, total_q, VARLEN), rows, seq_q, float("-inf"))
    delta = load_row_stat(row_stats(DELTA, batch_head, head, seq_q, q_start, total_q, VARLEN), rows, seq_q, 0.0)
    k_source = tile_source(K + head_offset(batch, kv_head, stride_kb, stride_kh),
                           streamed_rows(seq_k, VARLEN), head_dim, stride_kn, BLOCK_N, BLOCK_D, DESCRIPTORS)
    v_source = tile_source(V + head_offset(batch, kv_head, stride_vb, stride_vh),
                           streamed_rows(seq_k, VARLEN), head_dim, stride_vn, BLOCK_N, BLOCK_D, DESCRIPTORS)
    alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, head, ALIBI)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    if WINDOW:
        # One loop over the band, the tiles at its edges masked (kernels.bands.masked_at_band_edges;
        # why one loop: the forward's comment).
        key_first, whole_start, whole_end, key_end = window_key_tiles(
            block_m * BLOCK_M, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
        dq = dq_over_keys(dq, q, do, lse, delta, k_source, v_source, rows, dims, key_first, key_end,
                          stride_qm, stride_qd, stride_dom, stride_dod,
                          stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, sm_scale,
                          seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                          window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                          DROPOUT, True, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK,
                          whole_start, whole_end, True)
    else:
        # Off-band key tiles (unmasked), then the causal band and the ragged last key tile.
        unmasked_end = off_band_end(block_m * BLOCK_M, seq_q, seq_k, BLOCK_N, CAUSAL)
        key_end = causal_key_end((block_m + 1) * BLOCK_M, seq_q, seq_k, CAUSAL)
        dq = dq_over_keys(dq, q, do, lse, delta, k_source, v_source, rows, dims, 0, unmasked_end,
                          stride_qm, stride_qd, stride_dom, stride_dod,
                          stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, sm_scale,
                          seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                          window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                          DROPOUT, False, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)
        dq = dq_over_keys(dq, q, do, lse, delta, k_source, v_source, rows, dims, unmasked_end, key_end,
                          stride_qm, stride_qd, stride_dom, stride_dod,
                          stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, sm_scale,
                          seed_lo, seed_hi, drop_threshold, keep_scale, batch_head,
                          window_left, window_right, softcap, alibi_slope, CAUSAL, WINDOW, SOFTCAP, ALIBI,
                          DROPOUT, True, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)

    store_tile(DQ + head_offset(batch, head, stride_dqb, stride_dqh),
               dq * sm_scale, rows, dims, stride_dqm, stride_dqd, seq_q, head_dim, INTERPRETED)
