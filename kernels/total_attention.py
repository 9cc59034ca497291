"""Total attention: how much attention each key receives, summed over the queries.

    total[b, h, j] = sum_i P_ij,    P = softmax(sm_scale q k^T) (un-dropped)

(with a window, a softcap or ALiBi, P is the softmax they define: the same
kernels.scores.probabilities as the backward's, over the rows the band holds).

A forward-only by-product, computed after the forward from its log-normalizer:
one program per (key block, batch x head) rebuilds P tile by tile, exactly as the
dK/dV kernel does, and sums it over the query axis.  Each program owns its
columns, so there are no atomics and the result is deterministic.
"""

import triton
import triton.language as tl

from .bands import window_query_tiles
from .blocks import (
    causal_query_start,
    compensated_add,
    head_offset,
    load_row_stat,
    load_tile,
    pairwise_column_sums,
    program_coordinates,
    raw_scores,
)
from .head_slices import kept_operand, sliced_products
from .scores import head_slope, probabilities


# The window, softcap and ALiBi arguments and flags as in the forward (kernels.flash_forward),
# P being the one the forward normalised (kernels.scores.probabilities).
@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k", "first_batch_head",
                               "window_left", "window_right"])
def total_attention_kernel(
    Q, K, LSE, TOTAL,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    num_heads, group_size, seq_q, seq_k, head_dim,
    window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b,
    first_batch_head,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr,
    WINDOW: tl.constexpr = False, SOFTCAP: tl.constexpr = False, ALIBI: tl.constexpr = False,
    HEAD_CHUNK: tl.constexpr = 0,
):
    block_n, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size,
                                                                    first_batch_head)
    cols = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    # The key tile, or (HEAD_CHUNK) its base pointer: kernels.head_slices.
    k = kept_operand(K + head_offset(batch, kv_head, stride_kb, stride_kh), cols, dims, stride_kn, stride_kd,
                     seq_k, head_dim, HEAD_CHUNK)
    q_base = Q + head_offset(batch, head, stride_qb, stride_qh)
    stats = LSE + batch_head.to(tl.int64) * seq_q

    # One fp32 addition per query block: at Sq = 32k that is 512 sequential
    # additions per column, whose rounding Kahan compensation removes (as for the
    # forward's row sum).
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    total_error = tl.zeros((BLOCK_N,), dtype=tl.float32)
    alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, head, ALIBI)
    if WINDOW:  # only the rows that see a key of the tile (kernels.bands)
        query_start, _unmasked_start, _unmasked_end, rows_end = window_query_tiles(
            block_n * BLOCK_N, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
    else:
        query_start = causal_query_start(block_n * BLOCK_N, seq_q, seq_k, BLOCK_M, CAUSAL)
        rows_end = seq_q
    for row_start in range(query_start, rows_end, BLOCK_M):
        rows = row_start + tl.arange(0, BLOCK_M)
        if HEAD_CHUNK:
            raw = sliced_products(q_base, rows, stride_qm, stride_qd, seq_q, k, cols, stride_kn, stride_kd,
                                  seq_k, head_dim, BLOCK_D, HEAD_CHUNK, INTERPRETED)
        else:
            raw = raw_scores(load_tile(q_base, rows, dims, stride_qm, stride_qd, seq_q, head_dim), k, INTERPRETED)
        # Rows that see no key have lse = -inf, hence P = 0: they add nothing.
        lse = load_row_stat(stats, rows, seq_q, float("-inf"))
        p, _cap_slope = probabilities(raw, lse, rows, cols, seq_q, seq_k, sm_scale,
                                      window_left, window_right, softcap, alibi_slope,
                                      CAUSAL, WINDOW, SOFTCAP, ALIBI, True)
        total, total_error = compensated_add(total, total_error, pairwise_column_sums(p))

    tl.store(TOTAL + batch_head.to(tl.int64) * seq_k + cols, total, mask=cols < seq_k)
