"""kv_cache_attention's kernels: attention of a few new query tokens to a (paged) KV cache,
split over the keys (FlashDecoding), and the merge of the splits.

decode_split_kernel: one program per (row tile x split, sequence x kv head).  Its rows are
the query tokens x the H/Hkv query heads that share one kv head, token-major (row r is
token r // group, head kv_head * group + r % group), so the group's heads share every K/V
load, and a decode step (Sq = 1) still fills a 16-row tile with GQA.  A split is a
contiguous run of whole key tiles of [0, L_b) (L_b: sequence b's context length); the
program streams those of its split that the causal mask or window lets some of its rows
see, with the dense forward's online softmax (kernels.blocks), scores (kernels.scores) and
masks (kernels.bands), everything bottom-right aligned to L_b as the dense operator is to
Sk.  It writes the split's normalised fp32 output and log-normalizer to scratch -- or, where
the call has one split, the finished output and lse, and no merge is launched: a large batch
fills the device without splits, and its merge only copied the scratch (2 MiB written and read
back, one launch more, at B 128 with 1k keys).

decode_merge_kernel: per (row tile x head-dim chunk, sequence x kv head), the log-sum-exp
merge of the splits, read many at once, m = max_s lse_s, w_s = exp(lse_s - m):

    out = sum_s w_s out_s / sum_s w_s,      lse = m + log(sum_s w_s)

in fp32, the output rounded once to its dtype.  A split no row sees a key of wrote lse -inf
and out 0: its weight is 0; a row no split gives a key is out 0, lse -inf.
"""

import triton
import triton.language as tl

from .bands import visible_pairs
from .blocks import (
    LOG2_E,
    below,
    causal_key_end,
    finished_rows,
    mma,
    narrow,
    online_softmax_weights,
    program_coordinates,
    raw_scores,
    store_tile,
)
from .decode_cache import cache_slots, gather_rows, scatter_rows, slot_offsets
from .head_slices import kept_operand, sliced_products
from .scores import head_slope, softmax_scale, softmax_scores


@triton.jit
def group_rows(row_start, kv_head, group_size, BLOCK_M: tl.constexpr):
    """(rows, tokens, heads) of a row tile: the tile's rows, and the query token and query
    head each row is (token-major within the kv head's group)."""
    rows = row_start + tl.arange(0, BLOCK_M)
    return rows, rows // group_size, kv_head * group_size + rows % group_size


@triton.jit
def split_keys(context_len, split, num_splits, BLOCK_N: tl.constexpr):
    """[first, stop): split `split`'s keys, the same number of whole key tiles of [0, L) for
    every split; the last splits are empty where there are fewer tiles than splits."""
    tiles = tl.cdiv(tl.cdiv(context_len, BLOCK_N), num_splits)
    first = split * tiles * BLOCK_N
    return first, tl.minimum(first + tiles * BLOCK_N, context_len)


@triton.jit
def band_keys(first_token, last_token, seq_q, context_len, window_left, window_right,
              CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """[lo, hi): the keys some query token of [first_token, last_token] may see: the band of
    kernels.bands with Sk = L, all of [0, L) without a mask."""
    lo = 0
    hi = causal_key_end(last_token + 1, seq_q, context_len, CAUSAL)
    if WINDOW:
        offset = context_len - seq_q
        lo = tl.maximum(first_token + offset - window_left, 0)
        hi = tl.minimum(last_token + offset + window_right + 1, context_len)
    return lo, hi


@triton.jit
def cached_tile(base, row_offsets, row_mask, dims, stride_d, head_dim, descale,
                dtype: tl.constexpr, DEQUANTIZE: tl.constexpr, INTERPRETED: tl.constexpr):
    """A K or V tile of the cache in the queries' dtype: an fp8 cache (DEQUANTIZE) is
    dequantised as cache.to(fp32) * descale, rounded once to `dtype` (fp16/bf16/fp32), so
    its products are those of a cache stored in q's dtype."""
    tile = gather_rows(base, row_offsets, row_mask, dims, stride_d, head_dim)
    if DEQUANTIZE:
        tile = narrow(tile.to(tl.float32) * descale, dtype, INTERPRETED)
    return tile


@triton.jit
def store_rows(O, LSE, out, lse, batch, rows, tokens, heads, dims, stride_ob, stride_om, stride_oh, stride_od,
               stride_lb, stride_lh, stride_lm, rows_total, head_dim, INTERPRETED: tl.constexpr):
    """A row tile's finished fp32 output, rounded once to O's dtype, and its lse, at each row's
    (token, head) of sequence `batch` in O (B, Sq, H, D) and LSE (B, H, Sq)."""
    real = rows < rows_total
    out_rows = tokens.to(tl.int64) * stride_om + heads.to(tl.int64) * stride_oh
    scatter_rows(O + batch.to(tl.int64) * stride_ob, narrow(out, O.dtype.element_ty, INTERPRETED), out_rows, real,
                 dims, stride_od, head_dim)
    lse_rows = batch.to(tl.int64) * stride_lb + heads.to(tl.int64) * stride_lh + tokens.to(tl.int64) * stride_lm
    tl.store(LSE + lse_rows, lse, mask=real)


@triton.jit
def store_split(out, lse, batch, rows, tokens, heads, dims, rows_total, head_dim,
                out_base, lse_base, stride_pm, stride_pd,
                O, LSE, stride_ob, stride_om, stride_oh, stride_od, stride_lb, stride_lh, stride_lm,
                ONE_SPLIT: tl.constexpr, INTERPRETED: tl.constexpr):
    """One split's output tile and log-normalizer: fp32 to the scratch for the merge, or, where
    the split is the call's only one (ONE_SPLIT), finished to O and LSE as the merge would --
    its weight exp(lse - lse) is 1, so the merge would only copy and round it."""
    if ONE_SPLIT:
        store_rows(O, LSE, out, lse, batch, rows, tokens, heads, dims, stride_ob, stride_om, stride_oh, stride_od,
                   stride_lb, stride_lh, stride_lm, rows_total, head_dim, INTERPRETED)
    else:
        store_tile(out_base, out, rows, dims, stride_pm, stride_pd, rows_total, head_dim, INTERPRETED)
        tl.store(lse_base + rows, lse, mask=rows < rows_total)


# The lengths, the page size, the split count and the window vary from call to call: not
# specialised on (a variant per divisibility pattern, or per page size 1, otherwise).
@triton.jit(do_not_specialize=["kv_heads", "group_size", "seq_q", "page_size", "num_splits",
                               "window_left", "window_right", "first_batch_head"])
def decode_split_kernel(
    Q, K, V, BLOCK_TABLE, CONTEXT_LENS, OUTSIDE, PARTIAL_OUT, PARTIAL_LSE, O, LSE,
    sm_scale, k_descale, v_descale,
    stride_qb, stride_qm, stride_qh, stride_qd,
    stride_kp, stride_ks, stride_kh, stride_kd,
    stride_vp, stride_vs, stride_vh, stride_vd,
    stride_tb, stride_tp,
    stride_ps, stride_pm, stride_pd, stride_ls,
    stride_ob, stride_om, stride_oh, stride_od,
    stride_lb, stride_lh, stride_lm,
    kv_heads, group_size, seq_q, page_size, head_dim, num_splits,
    window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b,
    first_batch_head,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr,
    DEQUANTIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    INTERPRETED: tl.constexpr, CHECKED: tl.constexpr, ONE_SPLIT: tl.constexpr, PAGED: tl.constexpr,
    HEAD_CHUNK: tl.constexpr = 0,
):
    """One (row tile, split) of one (sequence, kv head): its fp32 partial output and lse, or
    with ONE_SPLIT (num_splits 1) the finished output and lse (store_split; no merge follows).
    CHECKED: OUTSIDE holds cache_values_kernel's answer, and a sequence whose values leave the
    cache reads no key (as if empty): its table and length are not followed out of bounds
    while the host has yet to read the answer and raise (kernels.value_check)."""
    block, batch_head, batch, kv_head, _ = program_coordinates(kv_heads, 1, first_batch_head)
    split = block % num_splits
    row_start = (block // num_splits) * BLOCK_M
    rows, tokens, heads = group_rows(row_start, kv_head, group_size, BLOCK_M)
    rows_total = seq_q * group_size
    dims = tl.arange(0, BLOCK_D)
    slot = batch_head.to(tl.int64) * num_splits + split  # (sequence, kv head, split) of the scratch
    out_base = PARTIAL_OUT + slot * stride_ps
    lse_base = PARTIAL_LSE + slot * stride_ls

    context_len = tl.load(CONTEXT_LENS + batch)
    if CHECKED:
        context_len = tl.where(tl.load(OUTSIDE + batch) != 0, 0, context_len)
    split_first, split_stop = split_keys(context_len, split, num_splits, BLOCK_N)
    last_token = (tl.minimum(row_start + BLOCK_M, rows_total) - 1) // group_size
    band_lo, band_hi = band_keys(row_start // group_size, last_token, seq_q, context_len,
                                 window_left, window_right, CAUSAL, WINDOW)
    key_first = tl.maximum(split_first, (band_lo // BLOCK_N) * BLOCK_N)  # whole tiles: none crosses a split
    key_stop = tl.minimum(split_stop, band_hi)
    if key_first >= key_stop:
        # No row of this tile sees a key of this split (past L, outside the band, or L = 0):
        # it contributes nothing to the merge, which the weight exp(-inf - m) = 0 says.
        empty_lse = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        store_split(tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32), empty_lse, batch, rows, tokens, heads, dims,
                    rows_total, head_dim, out_base, lse_base, stride_pm, stride_pd,
                    O, LSE, stride_ob, stride_om, stride_oh, stride_od, stride_lb, stride_lh, stride_lm,
                    ONE_SPLIT, INTERPRETED)
        return

    # Padding rows (past the tile's last token) read row 0 and are never stored: no row mask.
    q_rows = tl.where(rows < rows_total, tokens.to(tl.int64) * stride_qm + heads.to(tl.int64) * stride_qh, 0)
    q_base = Q + batch.to(tl.int64) * stride_qb
    q = kept_operand(q_base, q_rows, dims, 1, stride_qd, None, head_dim, HEAD_CHUNK)
    k_base = K + kv_head.to(tl.int64) * stride_kh
    v_base = V + kv_head.to(tl.int64) * stride_vh
    table_row = BLOCK_TABLE + batch.to(tl.int64) * stride_tb
    score_scale = softmax_scale(sm_scale, softcap, SOFTCAP, ALIBI)
    qk_scale = score_scale * LOG2_E
    alibi_slopes = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, heads[:, None], ALIBI)  # one per row

    row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_sum_error = tl.zeros((BLOCK_M,), dtype=tl.float32)  # Kahan compensation
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for key_start in range(key_first, key_stop, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)
        in_cache = cols < context_len  # the last page's slots past L hold no key of this sequence
        pages, slots = cache_slots(table_row, cols, context_len, page_size, stride_tp, batch, PAGED)
        k_rows = slot_offsets(pages, slots, stride_kp, stride_ks)
        if HEAD_CHUNK:  # keys past L read a slot that exists (cache_slots); their scores are masked
            raw = sliced_products(q_base, q_rows, 1, stride_qd, None, k_base, k_rows, 1, stride_kd, None,
                                  head_dim, BLOCK_D, HEAD_CHUNK, INTERPRETED)
        else:
            k = cached_tile(k_base, k_rows, in_cache, dims, stride_kd, head_dim, k_descale,
                            Q.dtype.element_ty, DEQUANTIZE, INTERPRETED)
            raw = raw_scores(q, k, INTERPRETED)
        s, _cap_slope = softmax_scores(raw, tokens, cols, seq_q, context_len, sm_scale, softcap, alibi_slopes,
                                       CAUSAL, SOFTCAP, ALIBI)
        s = tl.where(in_cache[None, :], s, float("-inf"))
        if CAUSAL or WINDOW:
            s = tl.where(visible_pairs(tokens, cols, seq_q, context_len, window_left, window_right, CAUSAL, WINDOW),
                         s, float("-inf"))
        p, rescale, row_max, row_sum, row_sum_error = online_softmax_weights(
            s, row_max, row_sum, row_sum_error, qk_scale)
        # Slots past L may hold anything, NaN included (0 * NaN is NaN): they read 0.
        v = cached_tile(v_base, slot_offsets(pages, slots, stride_vp, stride_vs), in_cache, dims, stride_vd,
                        head_dim, v_descale, Q.dtype.element_ty, DEQUANTIZE, INTERPRETED)
        # P is rounded to the queries' dtype for the product, as in the dense forward.
        acc = mma(narrow(p, v.dtype, INTERPRETED), v, acc * rescale[:, None], INTERPRETED)

    out, lse = finished_rows(acc, row_max, row_sum, score_scale)
    store_split(out, lse, batch, rows, tokens, heads, dims, rows_total, head_dim, out_base, lse_base,
                stride_pm, stride_pd, O, LSE, stride_ob, stride_om, stride_oh, stride_od, stride_lb, stride_lh,
                stride_lm, ONE_SPLIT, INTERPRETED)


@triton.jit
def split_partials(PARTIAL_OUT, PARTIAL_LSE, first_slot, splits, num_splits, rows, rows_total, dims, head_dim,
                   stride_ps, stride_pm, stride_pd, stride_ls):
    """A block of splits' log-normalizers [rows, splits] and normalised outputs [rows, splits,
    columns]; splits past num_splits and padding rows read lse -inf (weight 0) and out 0."""
    real_rows = (rows < rows_total)[:, None] & (splits < num_splits)[None, :]
    split_lse = tl.load(PARTIAL_LSE + (first_slot + splits)[None, :] * stride_ls + rows[:, None], mask=real_rows,
                        other=float("-inf"))
    real = real_rows[:, :, None] & below(dims, head_dim)[None, None, :]
    partial = tl.load(PARTIAL_OUT + (first_slot + splits)[None, :, None] * stride_ps
                      + rows[:, None, None] * stride_pm + dims[None, None, :] * stride_pd, mask=real, other=0.0)
    return split_lse, partial


@triton.jit(do_not_specialize=["kv_heads", "group_size", "seq_q", "num_splits", "first_batch_head"])
def decode_merge_kernel(
    PARTIAL_OUT, PARTIAL_LSE, O, LSE,
    stride_ps, stride_pm, stride_pd, stride_ls,
    stride_ob, stride_om, stride_oh, stride_od,
    stride_lb, stride_lh, stride_lm,
    kv_heads, group_size, seq_q, head_dim, num_splits,
    first_batch_head,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, DIM_CHUNKS: tl.constexpr, SPLIT_BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One (row tile, BLOCK_D columns of the head dim) of one (sequence, kv head).  The splits
    are read SPLIT_BLOCK at a time as one [rows, splits, columns] tile, lse and outputs in the
    same pass (the online softmax of the split kernel, over splits): one memory round trip for up to
    SPLIT_BLOCK splits.  The row tile is the (sequence, kv head)'s rows, no more (no tl.dot
    here asks for 16), and the head dim is cut into DIM_CHUNKS programs to keep that tile in
    registers and give a small batch more programs (kernels.decode_plan)."""
    block, batch_head, batch, kv_head, _ = program_coordinates(kv_heads, 1, first_batch_head)
    rows, tokens, heads = group_rows((block // DIM_CHUNKS) * BLOCK_M, kv_head, group_size, BLOCK_M)
    dims = (block % DIM_CHUNKS) * BLOCK_D + tl.arange(0, BLOCK_D)
    rows_total = seq_q * group_size
    first_slot = batch_head.to(tl.int64) * num_splits
    split_offsets = tl.arange(0, SPLIT_BLOCK)

    # The splits' lse are the "scores" of an online softmax whose weights exp(lse_s - m) are the
    # splits' shares of each row's normalizer (kernels.blocks.online_softmax_weights with scale
    # log2(e), so its exp2 is exp): the same running max, rescale and Kahan-compensated sum as
    # the split kernel's over keys.
    top = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    total_error = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for first in range(0, num_splits, SPLIT_BLOCK):
        split_lse, partial = split_partials(PARTIAL_OUT, PARTIAL_LSE, first_slot, first + split_offsets, num_splits,
                                            rows, rows_total, dims, head_dim, stride_ps, stride_pm, stride_pd,
                                            stride_ls)
        weight, rescale, top, total, total_error = online_softmax_weights(split_lse, top, total, total_error,
                                                                          LOG2_E)
        acc = acc * rescale[:, None] + tl.sum(weight[:, :, None] * partial, axis=1)
    # finished_rows with scale 1: out = acc / total and lse = m + log(total), 0 and -inf where total is 0.
    out, lse = finished_rows(acc, top, total, 1.0)
    store_rows(O, LSE, out, lse, batch, rows, tokens, heads, dims, stride_ob, stride_om, stride_oh, stride_od,
               stride_lb, stride_lh, stride_lm, rows_total, head_dim, INTERPRETED)
