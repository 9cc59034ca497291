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
share it, so the sum over the group happens in registers.
"""

import triton
import triton.language as tl

from kernels.blocks import (
    LOG2_E,
    base2_lse,
    causal_key_end,
    causal_query_start,
    head_offset,
    load_head_tile,
    load_row_stat,
    load_tile,
    mma,
    narrow,
    program_coordinates,
    recomputed_probabilities,
    score_gradient,
    store_tile,
)


# As in the forward, sizes are not specialised on (one compile per shape family).
@triton.jit(do_not_specialize=["num_heads", "seq_q", "head_dim"])
def delta_kernel(
    O, DO, DELTA,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    num_heads, seq_q, head_dim,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    block_m, batch_head, batch, head, _ = program_coordinates(num_heads, 1)
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    o = load_head_tile(O, batch, head, stride_ob, stride_oh, rows, dims, stride_om, stride_od, seq_q, head_dim)
    do = load_head_tile(DO, batch, head, stride_dob, stride_doh,
                        rows, dims, stride_dom, stride_dod, seq_q, head_dim)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + batch_head.to(tl.int64) * seq_q + rows, delta, mask=rows < seq_q)


@triton.jit(do_not_specialize=["num_heads", "num_kv_heads", "group_size", "seq_q", "seq_k", "head_dim"])
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
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    block_n, _, batch, kv_head, _ = program_coordinates(num_kv_heads, 1)
    cols = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    k = load_head_tile(K, batch, kv_head, stride_kb, stride_kh, cols, dims, stride_kn, stride_kd, seq_k, head_dim)
    v = load_head_tile(V, batch, kv_head, stride_vb, stride_vh, cols, dims, stride_vn, stride_vd, seq_k, head_dim)
    qk_scale = sm_scale * LOG2_E
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)

    query_start = causal_query_start(block_n * BLOCK_N, seq_q, seq_k, BLOCK_M, CAUSAL)
    for member in range(0, group_size):
        head = kv_head * group_size + member
        q_base = Q + head_offset(batch, head, stride_qb, stride_qh)
        do_base = DO + head_offset(batch, head, stride_dob, stride_doh)
        stats = (batch * num_heads + head).to(tl.int64) * seq_q
        for row_start in range(query_start, seq_q, BLOCK_M):
            rows = row_start + tl.arange(0, BLOCK_M)
            q = load_tile(q_base, rows, dims, stride_qm, stride_qd, seq_q, head_dim)
            do = load_tile(do_base, rows, dims, stride_dom, stride_dod, seq_q, head_dim)
            lse2 = base2_lse(load_row_stat(LSE + stats, rows, seq_q, float("-inf")))
            delta = load_row_stat(DELTA + stats, rows, seq_q, 0.0)

            p = recomputed_probabilities(q, k, lse2, rows, cols, seq_q, seq_k, qk_scale,
                                         CAUSAL, EMULATE_BF16)
            dv = mma(tl.trans(narrow(p, do.dtype, EMULATE_BF16)), do, dv, EMULATE_BF16)
            ds = score_gradient(p, do, v, delta, EMULATE_BF16)
            # dS is rounded to the input dtype for the product, like P in the forward.
            dk = mma(tl.trans(narrow(ds, q.dtype, EMULATE_BF16)), q, dk, EMULATE_BF16)

    store_tile(DK + head_offset(batch, kv_head, stride_dkb, stride_dkh),
               dk * sm_scale, cols, dims, stride_dkn, stride_dkd, seq_k, head_dim, EMULATE_BF16)
    store_tile(DV + head_offset(batch, kv_head, stride_dvb, stride_dvh),
               dv, cols, dims, stride_dvn, stride_dvd, seq_k, head_dim, EMULATE_BF16)


@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k", "head_dim"])
def dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    num_heads, group_size, seq_q, seq_k, head_dim,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EMULATE_BF16: tl.constexpr,
):
    block_m, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size)
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = load_head_tile(Q, batch, head, stride_qb, stride_qh, rows, dims, stride_qm, stride_qd, seq_q, head_dim)
    do = load_head_tile(DO, batch, head, stride_dob, stride_doh,
                        rows, dims, stride_dom, stride_dod, seq_q, head_dim)
    stats = batch_head.to(tl.int64) * seq_q
    lse2 = base2_lse(load_row_stat(LSE + stats, rows, seq_q, float("-inf")))
    delta = load_row_stat(DELTA + stats, rows, seq_q, 0.0)
    k_base = K + head_offset(batch, kv_head, stride_kb, stride_kh)
    v_base = V + head_offset(batch, kv_head, stride_vb, stride_vh)
    qk_scale = sm_scale * LOG2_E
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    key_end = causal_key_end((block_m + 1) * BLOCK_M, seq_q, seq_k, CAUSAL)
    for key_start in range(0, key_end, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        k = load_tile(k_base, cols, dims, stride_kn, stride_kd, seq_k, head_dim)
        v = load_tile(v_base, cols, dims, stride_vn, stride_vd, seq_k, head_dim)
        p = recomputed_probabilities(q, k, lse2, rows, cols, seq_q, seq_k, qk_scale,
                                     CAUSAL, EMULATE_BF16)
        ds = score_gradient(p, do, v, delta, EMULATE_BF16)
        dq = mma(narrow(ds, k.dtype, EMULATE_BF16), k, dq, EMULATE_BF16)

    store_tile(DQ + head_offset(batch, head, stride_dqb, stride_dqh),
               dq * sm_scale, rows, dims, stride_dqm, stride_dqd, seq_q, head_dim, EMULATE_BF16)
