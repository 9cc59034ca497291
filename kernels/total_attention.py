"""Total attention: how much attention each key receives, summed over the queries.

    total[b, h, j] = sum_i P_ij,    P = softmax(sm_scale q k^T) (un-dropped)

A forward-only by-product, computed after the forward from its log-normalizer:
one program per (key block, batch x head) rebuilds P tile by tile, exactly as the
dK/dV kernel does, and sums it over the query axis.  Each program owns its
columns, so there are no atomics and the result is deterministic.
"""

import triton
import triton.language as tl

from .blocks import (
    causal_query_start,
    compensated_add,
    head_offset,
    load_head_tile,
    load_row_stat,
    load_tile,
    pairwise_column_sums,
    probabilities,
    program_coordinates,
)


@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k", "first_batch_head"])
def total_attention_kernel(
    Q, K, LSE, TOTAL,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    num_heads, group_size, seq_q, seq_k, head_dim,
    first_batch_head,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    block_n, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size,
                                                                    first_batch_head)
    cols = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k = load_head_tile(K, batch, kv_head, stride_kb, stride_kh, cols, dims, stride_kn, stride_kd,
                       seq_k, head_dim)
    q_base = Q + head_offset(batch, head, stride_qb, stride_qh)
    stats = LSE + batch_head.to(tl.int64) * seq_q

    # One fp32 addition per query block: at Sq = 32k that is 512 sequential
    # additions per column, whose rounding Kahan compensation removes (as for the
    # forward's row sum).
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    total_error = tl.zeros((BLOCK_N,), dtype=tl.float32)
    query_start = causal_query_start(block_n * BLOCK_N, seq_q, seq_k, BLOCK_M, CAUSAL)
    for row_start in range(query_start, seq_q, BLOCK_M):
        rows = row_start + tl.arange(0, BLOCK_M)
        q = load_tile(q_base, rows, dims, stride_qm, stride_qd, seq_q, head_dim)
        # Rows that see no key have lse = -inf, hence P = 0: they add nothing.
        lse = load_row_stat(stats, rows, seq_q, float("-inf"))
        p = probabilities(q, k, lse, rows, cols, seq_q, seq_k, sm_scale, CAUSAL, True, INTERPRETED)
        total, total_error = compensated_add(total, total_error, pairwise_column_sums(p))

    tl.store(TOTAL + batch_head.to(tl.int64) * seq_k + cols, total, mask=cols < seq_k)
