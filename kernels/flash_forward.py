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

from .bands import masked_at_band_edges, visible_pairs, window_key_tiles
from .blocks import (
    LOG2_E,
    causal_key_end,
    off_band_end,
    finished_rows,
    head_offset,
    load_rows,
    tile_source,
    mma,
    narrow,
    online_softmax_weights,
    program_coordinates,
    raw_scores,
    store_tile,
)
from .dropout import dropout_keep
from .head_slices import kept_operand, sliced_products
from .scores import head_slope, softmax_scale, softmax_scores
from .sequences import at_token, row_stats, sequence_span, streamed_rows


@triton.jit
def attend_keys(q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims,
                first_key, key_stop, stride_qm, stride_qd, stride_kn, stride_kd, stride_vn, stride_vd,
                seq_q, seq_k, head_dim, sm_scale, qk_scale, seed_lo, seed_hi, drop_threshold, batch_head,
                window_left, window_right, softcap, alibi_slope,
                CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
                DROPOUT: tl.constexpr, MASKED: tl.constexpr,
                BLOCK_N: tl.constexpr, STAGES: tl.constexpr, DESCRIPTORS: tl.constexpr,
                INTERPRETED: tl.constexpr, HEAD_CHUNK: tl.constexpr,
                whole_start=0, whole_end=0, EDGES_ONLY: tl.constexpr = False):
    """The online softmax over key tiles [first_key, key_stop): returns the new
    (acc, row_max, row_sum, row_sum_error).  q is the query tile, or (HEAD_CHUNK) its
    base pointer (kernels.head_slices).

    MASKED=False is the off-band part: every tile lies inside the keys and inside every
    row's causal window (or sliding window), so no pair is masked and key rows are loaded
    without a bound check; only the head-dim padding is masked.  MASKED=True is the rest:
    the causal diagonal band (the window's edges) and the ragged last tile; with
    EDGES_ONLY (a window's one loop) only the tiles outside [whole_start, whole_end), which
    every row sees whole, are masked (the loads keep their bound checks).  STAGES is
    the loop's software-pipelining depth (the launch's num_stages); k_source and v_source
    are blocks.tile_source's.  qk_scale is log2(e) times scores.softmax_scale."""
    for key_start in tl.range(first_key, key_stop, BLOCK_N, num_stages=STAGES):
        cols = key_start + tl.arange(0, BLOCK_N)
        key_rows = seq_k if MASKED else None  # None: no bound check (blocks.below)
        if HEAD_CHUNK:
            raw = sliced_products(q, rows, stride_qm, stride_qd, seq_q, k_source, cols, stride_kn, stride_kd,
                                  key_rows, head_dim, dims.shape[0], HEAD_CHUNK, INTERPRETED)
        else:
            k = load_rows(k_source, key_start, cols, dims, stride_kn, stride_kd, key_rows, head_dim, DESCRIPTORS)
            raw = raw_scores(q, k, INTERPRETED)
        s, _cap_slope = softmax_scores(raw, rows, cols, seq_q, seq_k, sm_scale, softcap, alibi_slope,
                                       CAUSAL, SOFTCAP, ALIBI)
        if EDGES_ONLY:
            s = masked_at_band_edges(s, float("-inf"), key_start, whole_start, whole_end, rows, cols, seq_q, seq_k,
                                     window_left, window_right, CAUSAL, WINDOW)
        elif MASKED:
            s = tl.where(visible_pairs(rows, cols, seq_q, seq_k, window_left, window_right, CAUSAL, WINDOW),
                         s, float("-inf"))
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
#
# The variants (kernels.problem says what the host passes): VARLEN reads each program's
# sequence from cu_seqlens (kernels.sequences; seq_q, seq_k are then the longest
# lengths), WINDOW limits keys to a band (kernels.bands), SOFTCAP and ALIBI change the
# scores (kernels.scores).  Their arguments are None and their flags left at False for
# plain attention, which then compiles exactly as without them.
@triton.jit(do_not_specialize=["num_heads", "group_size", "seq_q", "seq_k",
                               "seed_lo", "seed_hi", "drop_threshold", "first_batch_head",
                               "total_q", "window_left", "window_right"])
def flash_forward_kernel(
    Q, K, V, O, LSE,
    sm_scale,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
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
        K = at_token(K, k_start, stride_kn)
        V = at_token(V, k_start, stride_vn)
    k_base = K + head_offset(batch, kv_head, stride_kb, stride_kh)
    v_base = V + head_offset(batch, kv_head, stride_vb, stride_vh)
    k_source = tile_source(k_base, streamed_rows(seq_k, VARLEN), head_dim, stride_kn, BLOCK_N, BLOCK_D, DESCRIPTORS)
    v_source = tile_source(v_base, streamed_rows(seq_k, VARLEN), head_dim, stride_vn, BLOCK_N, BLOCK_D, DESCRIPTORS)

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q = kept_operand(Q + head_offset(batch, head, stride_qb, stride_qh), rows, dims, stride_qm, stride_qd,
                     seq_q, head_dim, HEAD_CHUNK)
    score_scale = softmax_scale(sm_scale, softcap, SOFTCAP, ALIBI)
    qk_scale = score_scale * LOG2_E
    alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, head, ALIBI)

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_sum_error = tl.zeros((BLOCK_M,), dtype=tl.float32)  # Kahan compensation
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    if WINDOW:
        # One loop over the band's key tiles: those every row sees whole skip the mask by a
        # branch uniform over the program, the edges take it.  Three loops (left edge, inside,
        # right edge) each paid a software pipeline's fill and drain on a band of ~18 tiles:
        # one loop was 1-36 % faster on an H100 (bf16, left 1024 / 4096, S = 8192, A/B in one call;
        # reports/h100-sm90/variants/tuning/band-loop/).
        key_first, whole_start, whole_end, key_end = window_key_tiles(
            block_m * BLOCK_M, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
        acc, row_max, row_sum, row_sum_error = attend_keys(
            q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims, key_first, key_end,
            stride_qm, stride_qd, stride_kn, stride_kd, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, sm_scale, qk_scale,
            seed_lo, seed_hi, drop_threshold, batch_head, window_left, window_right, softcap, alibi_slope,
            CAUSAL, WINDOW, SOFTCAP, ALIBI, DROPOUT, True, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK,
            whole_start, whole_end, True)
    else:
        # Off-band key tiles first (no pair masked), then the causal band and the ragged
        # tail: the causal kernels' long loop runs without a mask.  The split does not
        # change the order in which tiles are added.
        unmasked_end = off_band_end(block_m * BLOCK_M, seq_q, seq_k, BLOCK_N, CAUSAL)
        key_end = causal_key_end((block_m + 1) * BLOCK_M, seq_q, seq_k, CAUSAL)
        acc, row_max, row_sum, row_sum_error = attend_keys(
            q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims, 0, unmasked_end,
            stride_qm, stride_qd, stride_kn, stride_kd, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, sm_scale, qk_scale,
            seed_lo, seed_hi, drop_threshold, batch_head, window_left, window_right, softcap, alibi_slope,
            CAUSAL, WINDOW, SOFTCAP, ALIBI, DROPOUT, False, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)
        acc, row_max, row_sum, row_sum_error = attend_keys(
            q, acc, row_max, row_sum, row_sum_error, k_source, v_source, rows, dims, unmasked_end, key_end,
            stride_qm, stride_qd, stride_kn, stride_kd, stride_vn, stride_vd,
            seq_q, seq_k, head_dim, sm_scale, qk_scale,
            seed_lo, seed_hi, drop_threshold, batch_head, window_left, window_right, softcap, alibi_slope,
            CAUSAL, WINDOW, SOFTCAP, ALIBI, DROPOUT, True, BLOCK_N, STAGES, DESCRIPTORS, INTERPRETED, HEAD_CHUNK)

    out, lse = finished_rows(acc, row_max, row_sum, score_scale)
    if DROPOUT:
        out = out * keep_scale
    if VARLEN:
        # Read again rather than kept live through the key loop, whose D = 128 tiles take
        # every register: one pointer fewer to hold across it. (Measured faster on an H100 in an
        # unpublished development run; the published varlen figures are those of
        # reports/h100-sm90/variants/benchmark/.)
        q_start = tl.load(CU_SEQLENS_Q + batch)
        O = at_token(O, q_start, stride_om)
    o_base = O + head_offset(batch, head, stride_ob, stride_oh)
    store_tile(o_base, out, rows, dims, stride_om, stride_od, seq_q, head_dim, INTERPRETED)
    lse_base = row_stats(LSE, batch_head, head, seq_q, q_start, total_q, VARLEN)
    tl.store(lse_base + rows, lse, mask=rows < seq_q)
