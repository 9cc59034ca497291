"""FlashAttention-2 forward kernel: one program per (query block, batch x head).

The program keeps its query tile in registers and streams key/value tiles,
maintaining the online softmax (running row max m, running row sum l, and an
un-normalised fp32 accumulator that is rescaled whenever m grows).  The output
is normalised once at the end, and the log-normalizer lse = ln(sum exp(s)) is
stored for the backward pass.

With DROPOUT, dropped weights leave the P @ V product but not the row sum: lse
stays the un-dropped log-normalizer (the backward rebuilds P from it), and the
1/(1-p) rescale is applied once to the fp32 output rather than to every weight,
which saves a multiply per element and a rounding before the low-precision cast.
"""

import triton
import triton.language as tl

from .blocks import (
    LOG2_E,
    causal_key_end,
    off_band_end,
    dropout_keep,
    finished_rows,
    head_offset,
    load_head_tile,
    load_rows,
    tile_source,
    mma,
    narrow,
    online_softmax_weights,
    program_coordinates,
    raw_scores,
    store_tile,
    visible,
)


@triton.jit
def attend_keys(q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims,
                first_key, key_stop, stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, qk_scale, seed_lo, seed_hi, drop_threshold, batch_head,
                CAUSAL: tl.constexpr, DROPOUT: tl.constexpr, MASKED: tl.constexpr,
                BLOCK_N: tl.constexpr, STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr,
                INTERPRETED: tl.constexpr):
    """The online softmax over key tiles [first_key, key_stop): returns the new
    (acc, row_max, row_sum, row_sum_error).

    MASKED=False is the off-band part: every tile lies inside the keys and inside every
    row's causal window, so no pair is masked and key rows are loaded without a bound
    check; only the head-dim padding is masked.  MASKED=True is the rest: the causal
    diagonal band and the ragged last tile.  STAGES is the loop's software-pipelining
    depth (the launch's num_stages); k_source and v_source are blocks.tile_source's."""
    for key_start in tl.range(first_key, key_stop, BLOCK_N, num_stages=STAGES):
        cols = key_start + tl.arange(0, BLOCK_N)
        key_rows = seq_k if MASKED else None  # None: no bound check (blocks.below)
        k = load_rows(k_source, key_start, cols, dims, stride_kn, stride_kd, key_rows, head_dim, DESCRIPTORS)
        s = raw_scores(q, k, INTERPRETED)
        if MASKED:
            s = tl.where(visible(rows, cols, seq_q, seq_k, CAUSAL), s, float("-inf"))
        p, rescale, row_max, row_sum, row_sum_error = online_softmax_weights(
            s, row_max, row_sum, row_sum_error, qk_scale)

        v = load_rows(v_source, key_start, cols, dims, stride_vn, stride_vd, key_rows, head_dim, DESCRIPTORS)
        if DROPOUT:
            p = tl.where(dropout_keep(seed_lo, seed_hi, drop_threshold, batch_head, rows, key_start, BLOCK_N),
                         p, 0.0)
        # P is rounded to the input dtype for the tensor-core product, as in
        # every fused attention kernel; the accumulator stays fp32.
        acc = mma(narrow(p, v.dtype, INTERPRETED), v, acc * rescale[:, None], INTERPRETED)
    return acc, row_max, row_sum, row_sum_error


# Sequence lengths are not specialised on: Triton would otherwise compile a new variant
# for every divisibility pattern (509, 1000, 1024, 1, ...).  head_dim is: every supported
# head dim is a multiple of 16, which Triton then knows, so the head-dim mask is constant
# over 16 columns and tiles load as 16-byte vectors (one variant; each kernel does so).
@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k",
                               "seed_lo", "seed_hi", "drop_threshold", "first_batch_head"])
def flash_forward_kernel(
    Q, K, V, O, LSE,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    num_heads, group_size, seq_q, seq_k, head_dim,
    seed_lo, seed_hi, drop_threshold, keep_scale,
    first_batch_head,
    CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    block_m, batch_head, batch, head, kv_head = program_coordinates(num_heads, group_size,
                                                                    first_batch_head)
    k_base = K + head_offset(batch, kv_head, stride_kb, stride_kh)
    v_base = V + head_offset(batch, kv_head, stride_vb, stride_vh)
    k_source = tile_source(k_base, seq_k, head_dim, stride_kn, BLOCK_N, BLOCK_D, DESCRIPTORS)
    v_source = tile_source(v_base, seq_k, head_dim, stride_vn, BLOCK_N, BLOCK_D, DESCRIPTORS)

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = load_head_tile(Q, batch, head, stride_qb, stride_qh, rows, dims, stride_qm, stride_qd, seq_q, head_dim)
    qk_scale = sm_scale * LOG2_E

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_sum_error = tl.zeros((BLOCK_M,), dtype=tl.float32)  # Kahan compensation
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    # Off-band key tiles first (no pair masked), then the causal band and the ragged
    # tail.  The split does not change the order in which tiles are added.
    band_start = off_band_end(block_m * BLOCK_M, seq_q, seq_k, BLOCK_N, CAUSAL)
    key_end = causal_key_end((block_m + 1) * BLOCK_M, seq_q, seq_k, CAUSAL)
    acc, row_max, row_sum, row_sum_error = attend_keys(
        q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims, 0, band_start,
        stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, qk_scale,
        seed_lo, seed_hi, drop_threshold, batch_head, CAUSAL, DROPOUT, False, BLOCK_N, STAGES, DESCRIPTORS,
        INTERPRETED)
    acc, row_max, row_sum, row_sum_error = attend_keys(
        q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims, band_start, key_end,
        stride_kn, stride_kd, stride_vn, stride_vd, seq_q, seq_k, head_dim, qk_scale,
        seed_lo, seed_hi, drop_threshold, batch_head, CAUSAL, DROPOUT, True, BLOCK_N, STAGES, DESCRIPTORS,
        INTERPRETED)

    out, lse = finished_rows(acc, row_max, row_sum, sm_scale)
    if DROPOUT:
        out = out * keep_scale
    o_base = O + head_offset(batch, head, stride_ob, stride_oh)
    store_tile(o_base, out, rows, dims, stride_om, stride_od, seq_q, head_dim, INTERPRETED)
    tl.store(LSE + batch_head.to(tl.int64) * seq_q + rows, lse, mask=rows < seq_q)
