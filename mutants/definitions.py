"""The mutants: one realistic fault class each, as small edits of the real kernels.

Every snippet is copied from the kernel source and must occur there exactly once
(see transform.apply_edit).  `crash` and `hang` are fixtures for the robustness
of a run (process isolation, per-case time limits), not sensitivity mutants.
"""

from __future__ import annotations

from conformance.bundled.mutants.transform import Edit, Mutant

_VISIBLE_CAUSAL = "mask = mask & (cols[None, :] <= rows[:, None] + (seq_k - seq_q))"
_FORWARD = "flash_forward.py"
_BACKWARD = "flash_backward.py"
_PIECEWISE_FORWARD = "piecewise_forward.py"
_BANDS = "bands.py"
_SCORES = "scores.py"
# The online softmax's initial running max, in each forward kernel.  Its running sum (and
# accumulator) need no mutants: whatever they start at, the first key tile multiplies by
# rescale = exp2(-inf - max) = 0 (an empty row keeps out 0 and lse -inf either way), so a
# wrong start there is an equivalent mutant that no case can kill.
_RUNNING_MAX_START = 'row_max = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)'

# A GQA dK/dV kernel with one program per *query* head, each adding its share into
# an fp32 buffer it read when it started: correct whenever the programs of one kv
# head run one after another, lost updates whenever they overlap.
_RACE_EDITS = (
    Edit("flash.py",
         "    dk = new_output(k.shape, k.dtype, k.device)\n    dv = new_output(v.shape, v.dtype, v.device)\n",
         "    dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)\n"
         "    dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)\n"),
    Edit("flash.py", '_tiles(problem, "k", dkdv["BLOCK_N"], kv_heads)', '_tiles(problem, "k", dkdv["BLOCK_N"], heads)'),
    Edit("flash.py", "    return dq, dk, dv\n", "    return dq, dk.to(k.dtype), dv.to(v.dtype)\n"),
    Edit(_BACKWARD, "block_n, _, batch, kv_head, _ = program_coordinates(num_kv_heads, 1, first_batch_head,",
         "block_n, _, batch, own_head, kv_head = program_coordinates(num_heads, group_size, first_batch_head,"),
    Edit(_BACKWARD, "    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)\n",
         "    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)\n"
         "    dk_before = load_head_tile(DK, batch, kv_head, stride_dkb, stride_dkh, cols, dims,\n"
         "                               stride_dkn, stride_dkd, seq_k, head_dim)\n"
         "    dv_before = load_head_tile(DV, batch, kv_head, stride_dvb, stride_dvh, cols, dims,\n"
         "                               stride_dvn, stride_dvd, seq_k, head_dim)\n"),
    Edit(_BACKWARD, "    for member in range(0, group_size):\n        head = kv_head * group_size + member\n",
         "    for member in range(0, 1):\n        head = own_head\n"),
    Edit(_BACKWARD, "               dk * sm_scale, cols,", "               dk_before + dk * sm_scale, cols,"),
    Edit(_BACKWARD, "               dv, cols, dims, stride_dvn,", "               dv_before + dv, cols, dims, stride_dvn,"),
)

MUTANTS: tuple[Mutant, ...] = (
    Mutant("scale_padded_head_dim",
           "softmax scale off by a small factor: 1/sqrt of the padded head dim (d96: 1/sqrt(128), 0.87x)",
           (Edit("flash.py", "return 1.0 / math.sqrt(q.shape[3]) if sm_scale is None",
                 "return 1.0 / math.sqrt(padded_head_dim(q.shape[3], q.dtype)) if sm_scale is None"),)),
    Mutant("causal_off_by_one",
           "causal mask off by one: the diagonal key (j = i + Sk - Sq) is hidden (< instead of <=)",
           (Edit("blocks.py", _VISIBLE_CAUSAL,
                 "mask = mask & (cols[None, :] < rows[:, None] + (seq_k - seq_q))"),)),
    Mutant("causal_top_left",
           "causal mask aligned top-left instead of bottom-right (wrong only when Sq != Sk)",
           (Edit("blocks.py", _VISIBLE_CAUSAL, "mask = mask & (cols[None, :] <= rows[:, None])"),)),
    Mutant("ragged_keys_unmasked",
           "ragged sequence end: keys past Sk (the zero padding of the last tile) are not masked",
           (Edit("blocks.py", "mask = (rows[:, None] < seq_q) & (cols[None, :] < seq_k)",
                 "mask = rows[:, None] < seq_q"),)),
    Mutant("no_accumulator_rescale",
           "online softmax: the output accumulator is not rescaled when the running max grows",
           (Edit(_FORWARD, "v, acc * rescale[:, None], INTERPRETED)", "v, acc, INTERPRETED)"),)),
    Mutant("fp16_accumulation",
           "fp16 accumulation: tl.dot of fp16 operands accumulates in fp16 (out_dtype=float16)",
           (Edit("blocks.py", "    else:\n        acc = tl.dot(a, b, acc)\n",
                 "    elif a.dtype == tl.float16:\n"
                 "        acc = tl.dot(a, b, acc.to(tl.float16), out_dtype=tl.float16).to(tl.float32)\n"
                 "    else:\n        acc = tl.dot(a, b, acc)\n"),)),
    Mutant("lse_log2",
           "wrong log-normalizer stored: log2 of the row sum instead of ln (the backward rebuilds P from it)",
           (Edit("blocks.py", "row_max * sm_scale + tl.math.log(safe_sum)",
                 "row_max * sm_scale + tl.math.log2(safe_sum)"),)),
    Mutant("dropout_not_rescaled",
           "dropout: kept weights not rescaled by 1/(1-p)",
           (Edit("dropout.py", "return 1.0 / (1.0 - self.p)", "return 1.0"),)),
    Mutant("dkdv_block_lost",
           "dK/dV partial sums of one query block lost (the unmasked dK/dV loop starts one block late)",
           (Edit(_BACKWARD, "            unmasked_start, full_rows_end,",
                 "            unmasked_start + BLOCK_M, full_rows_end,"),)),
    Mutant("gqa_heads_interleaved",
           "GQA head mapping wrong: query head h reads kv head h mod Hkv instead of h // (H/Hkv)",
           (Edit("blocks.py", "return block, batch_head, batch, head, head // group_size",
                 "return block, batch_head, batch, head, head % (num_heads // group_size)"),)),
    Mutant("row_stride_ignored",
           "stride of a non-contiguous input ignored: rows assumed head_dim apart, as in a contiguous tensor",
           (Edit("blocks.py",
                 "    ptrs = base + rows[:, None] * stride_row + cols[None, :] * stride_col\n"
                 "    in_range = below(rows, n_rows)[:, None] & below(cols, n_cols)[None, :]\n    return tl.load(",
                 "    ptrs = base + rows[:, None] * (cols.shape[0] if n_cols is None else n_cols)"
                 " + cols[None, :] * stride_col\n"
                 "    in_range = below(rows, n_rows)[:, None] & below(cols, n_cols)[None, :]\n    return tl.load("),)),
    Mutant("total_batch_offset",
           "total_attention reads the log-normalizer of batch 0 for every batch (batch offset dropped)",
           (Edit("total_attention.py", "stats = LSE + batch_head.to(tl.int64) * seq_q",
                 "stats = LSE + head.to(tl.int64) * seq_q"),)),
    Mutant("piecewise_threshold_inclusive",
           "piecewise_attention threshold off by one: distance == threshold scored as near (q2 . k2 expected)",
           (Edit("piecewise_blocks.py", "return distance < dist_threshold",
                 "return distance <= dist_threshold"),)),
    Mutant("dropout_backward_stream",
           "dropout mask regenerated differently in the backward (seed words swapped in the dQ kernel)",
           (Edit(_BACKWARD, "keep = dropout_keep(seed_lo, seed_hi, drop_threshold, batch_head, rows, key_start,",
                 "keep = dropout_keep(seed_hi, seed_lo, drop_threshold, batch_head, rows, key_start,"),)),
    Mutant("softmax_grad_no_delta",
           "softmax backward drops the row term: dS = P * dP instead of P * (dP - delta)",
           (Edit("blocks.py", "return p * (dp - delta)", "return p * dp"),)),
    Mutant("dq_unscaled",
           "dQ misses the softmax scale (chain rule through s = scale * q.k)",
           (Edit(_BACKWARD, "dq * sm_scale, rows, dims, stride_dqm", "dq, rows, dims, stride_dqm"),)),
    Mutant("masked_row_nan",
           "fully masked rows: no guard for a running max of -inf, exp2(-inf - -inf) = NaN",
           (Edit("blocks.py", 'safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)',
                 "safe_max = new_max"),)),
    Mutant("gqa_dkdv_race",
           "race: GQA dK/dV summed across query-head programs by a non-atomic read-modify-write",
           _RACE_EDITS,
           interpreter_unreachable="the interpreter runs programs one after another, so every "
                                   "read-modify-write sees the previous program's store"),
    # ---- faults of the fast paths (issue 18)
    Mutant("causal_band_one_block_late",
           "causal split: the unmasked off-band loop runs one key tile into the diagonal band "
           "(future keys visible to the block's first rows)",
           (Edit("blocks.py", "    return (end // BLOCK_N) * BLOCK_N\n",
                 "    return tl.minimum((end // BLOCK_N + 1) * BLOCK_N, (seq_k // BLOCK_N) * BLOCK_N)\n"),)),
    Mutant("row_sum_not_rescaled",
           "online softmax: the running row sum is not rescaled when the running max grows",
           (Edit("blocks.py", "compensated_add(row_sum * rescale, row_sum_error * rescale,",
                 "compensated_add(row_sum, row_sum_error,"),)),
    Mutant("last_query_tile_unwritten",
           "dense forward grid rounded down: the last, partial query tile is never computed (its rows "
           "keep the NaN the harness poisons new outputs with)",
           (Edit("flash.py", 'launch(flash_forward_kernel, blocks, batch_heads,',
                 'launch(flash_forward_kernel, blocks if tiles else max(1, seq_q // cfg["BLOCK_M"]), batch_heads,'),)),
    Mutant("running_max_starts_at_zero",
           "online softmax: the running max starts at 0 instead of -inf (exact for ordinary scores; "
           "rows whose every score is far below zero underflow to an empty row)",
           (Edit(_FORWARD, _RUNNING_MAX_START, "row_max = tl.zeros((BLOCK_M,), dtype=tl.float32)"),)),
    Mutant("piecewise_running_max_starts_at_zero",
           "piecewise_attention's online softmax: the running max starts at 0 instead of -inf (exact for "
           "ordinary scores; rows whose every score, q1.k1 or q2.k2, is far below zero underflow)",
           (Edit(_PIECEWISE_FORWARD, _RUNNING_MAX_START, "row_max = tl.zeros((BLOCK_M,), dtype=tl.float32)"),)),
    Mutant("stale_value_stage",
           "pipelined key loop reads a stale stage: every value tile after the first is the "
           "previous iteration's (the scores use the current key tile)",
           (Edit(_FORWARD, "v = load_rows(v_source, key_start, cols, dims,",
                 "v = load_rows(v_source, key_start - BLOCK_N * (key_start > first_key), "
                 "cols - BLOCK_N * (key_start > first_key), dims,"),)),
    Mutant("descriptor_row_stride",
           "tensor descriptor built with the wrong row stride: rows assumed head_dim apart (wrong for "
           "every strided layout), on the loops that stream tiles through descriptors",
           (Edit("blocks.py", "shape=[n_rows, n_cols], strides=[stride_row, 1],",
                 "shape=[n_rows, n_cols], strides=[n_cols, 1],"),),
           interpreter_unreachable="the interpreter's launch tables stream tiles through pointers, "
                                   "not descriptors"),
    # ---- faults of FlashAttention-2's variants (issue 33): each edits a path that only its
    # variant's kernels compile (WINDOW, SOFTCAP, ALIBI, VARLEN), so plain cases pass for it
    Mutant("window_left_edge_hidden",
           "sliding window off by one on the left: the key at distance left from the diagonal "
           "(j = i + Sk - Sq - left, the band's first key) is hidden (> instead of >=)",
           (Edit(_BANDS, "(cols[None, :] >= diagonal - window_left)",
                 "(cols[None, :] > diagonal - window_left)"),)),
    Mutant("window_right_edge_past",
           "sliding window off by one on the right: the key one past the band's last "
           "(j = i + Sk - Sq + right + 1) is visible (an exclusive bound compared inclusively)",
           (Edit(_BANDS, "(cols[None, :] <= diagonal + window_right)",
                 "(cols[None, :] <= diagonal + window_right + 1)"),)),
    Mutant("window_first_tile_rounded_up",
           "sliding window tile bounds: the key loop's first tile rounded up instead of down "
           "(forward and dQ skip the band's keys before the next tile border)",
           (Edit(_BANDS, "first = (tl.maximum(row_start + offset - window_left, 0) // BLOCK_N) * BLOCK_N",
                 "first = tl.cdiv(tl.maximum(row_start + offset - window_left, 0), BLOCK_N) * BLOCK_N"),)),
    Mutant("window_dkdv_first_tile_rounded_up",
           "sliding window tile bounds of the dK/dV kernel: its query loop's first tile rounded up "
           "instead of down (the rows before the next tile border add nothing to dK and dV)",
           (Edit(_BANDS, "first = (tl.maximum(col_start - offset - window_right, 0) // BLOCK_M) * BLOCK_M",
                 "first = tl.cdiv(tl.maximum(col_start - offset - window_right, 0), BLOCK_M) * BLOCK_M"),)),
    Mutant("softcap_backward_no_slope",
           "softcap backward misses the cap's derivative: dS not multiplied by 1 - tanh^2(s / c)",
           (Edit(_SCORES, "ds = ds * cap_slope", "ds = ds"),)),
    Mutant("softcap_hardware_tanh",
           "softcap through the GPU's approximate tanh (PTX tanh.approx.f32, relative error 2^-10.99, "
           "one special-function instruction; FlashAttention-2/3's CUDA kernels take it) instead of an "
           "fp32-accurate one: an error of up to softcap * 5e-4 on a capped score (fp16 / bf16 inputs' "
           "lse shows it too: 3.6x / 5.3x torch's error on the H100)",
           (Edit(_SCORES, "tanh, cap_slope = tanh_and_slope(raw * (sm_scale / softcap))",
                 'tanh = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [raw * (sm_scale / softcap)], '
                 "dtype=tl.float32, is_pure=True, pack=1)\n"
                 "        cap_slope = 1.0 - tanh * tanh"),),
           interpreter_unreachable="inline PTX: NVIDIA GPUs only, the interpreter runs no assembly",
           backends=("cuda",)),
    Mutant("softcap_16bit_tanh",
           "softcap through tanh = 1 - 2 / (1 + exp(2x)), two special-function operations (softcap +38..+83 % "
           "over plain on an H100, +83..+184 % with the kernels' tanh) with an absolute error of an ulp of 1, no "
           "relative accuracy near 0: an error of softcap * 1e-7 on scores the matched path has to "
           "1e-7 of their size (lse of fp16 / bf16 inputs too: up to 2.4x on the H100)",
           (Edit(_SCORES, "tanh, cap_slope = tanh_and_slope(raw * (sm_scale / softcap))",
                 "reciprocal = 1.0 / (1.0 + tl.math.exp2(raw * (sm_scale / softcap) * 2.8853900817779268))\n"
                 "        tanh = tl.math.fma(-2.0, reciprocal, 1.0)\n"
                 "        cap_slope = 4.0 * reciprocal * (1.0 - reciprocal)"),)),
    Mutant("alibi_top_left",
           "ALiBi distance aligned top-left: bias from |i - j| instead of |i + Sk - Sq - j| "
           "(wrong only when Sq != Sk)",
           (Edit(_SCORES, "distance = rows[:, None] + (seq_k - seq_q) - cols[None, :]",
                 "distance = rows[:, None] - cols[None, :]"),)),
    Mutant("alibi_bias_added",
           "ALiBi sign: the bias slope * distance is added to the scores instead of subtracted",
           (Edit(_SCORES, "return distance.to(tl.float32)", "return -distance.to(tl.float32)"),)),
    Mutant("alibi_bias_in_scaled_units",
           "ALiBi alone: the bias subtracted from the raw scores q . k as slope * distance, not in their "
           "units (slope / sm_scale) * distance (the softmax then scales it by sm_scale a second time)",
           (Edit(_SCORES, "-(alibi_slope / sm_scale), raw)", "-alibi_slope, raw)"),)),
    Mutant("alibi_slope_of_kv_head",
           "ALiBi under GQA/MQA: the forward takes the slope of the query head's kv head index "
           "(slopes[h // group]) instead of its own (slopes[h])",
           (Edit(_FORWARD, "alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, head, ALIBI)",
                 "alibi_slope = head_slope(ALIBI_SLOPES, stride_alibi_b, batch, kv_head, ALIBI)"),)),
    Mutant("alibi_slopes_of_first_batch",
           "ALiBi slopes of shape (B, H): every sequence takes batch 0's row (the batch stride dropped)",
           (Edit(_SCORES, "slope = tl.load(SLOPES + batch * stride_batch + head)",
                 "slope = tl.load(SLOPES + head)"),)),
    Mutant("varlen_keys_of_next_sequence",
           "varlen: the forward reads sequence b's keys from its neighbour's offset cu_seqlens_k[b + 1] "
           "(values and lengths from its own; the last sequence reads past the end of k)",
           (Edit(_FORWARD, "K = at_token(K, k_start, stride_kn)",
                 "K = at_token(K, tl.load(CU_SEQLENS_K + batch + 1), stride_kn)"),)),
    Mutant("varlen_dkdv_query_spans_of_keys",
           "varlen: the dK/dV kernel takes each sequence's query span from cu_seqlens_k (right only "
           "where every sequence has as many queries as keys)",
           (Edit(_BACKWARD, "q_start, seq_q = sequence_span(CU_SEQLENS_Q, batch)\n"
                            "        k_start, seq_k = sequence_span(CU_SEQLENS_K, batch)\n"
                            "        if col_start >= seq_k:",
                 "q_start, seq_q = sequence_span(CU_SEQLENS_K, batch)\n"
                 "        k_start, seq_k = sequence_span(CU_SEQLENS_K, batch)\n"
                 "        if col_start >= seq_k:"),)),
    # ---- faults of kv_cache_attention (issue 34): the split kernel, its merge, the page
    # addressing and the append (kernels/decode_forward.py, kernels/decode_cache.py)
    Mutant("kv_cache_merge_without_rescale",
           "kv_cache_attention's merge sums the splits' normalised outputs without their weights "
           "exp(lse_s - m) (exact with one split that sees keys)",
           (Edit("decode_forward.py", "acc = acc * rescale[:, None] + tl.sum(weight[:, :, None] * partial, axis=1)",
                 "acc = acc * rescale[:, None] + tl.sum(partial, axis=1)"),)),
    Mutant("kv_cache_empty_split_lse_zero",
           "kv_cache_attention: a split that sees no key writes lse 0 instead of -inf, so the merge "
           "weighs its output of 0 in",
           (Edit("decode_forward.py", 'empty_lse = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)',
                 "empty_lse = tl.zeros((BLOCK_M,), dtype=tl.float32)"),)),
    Mutant("kv_cache_last_page_unmasked",
           "kv_cache_attention: the slots of a sequence's last page past its length L are not masked "
           "(the keys run to the page's end)",
           (Edit("decode_forward.py", "in_cache = cols < context_len",
                 "in_cache = cols < tl.cdiv(context_len, page_size) * page_size"),
            Edit("decode_forward.py", "cache_slots(table_row, cols, context_len,",
                 "cache_slots(table_row, cols, tl.cdiv(context_len, page_size) * page_size,"))),
    Mutant("kv_cache_split_border_tile_twice",
           "kv_cache_attention's split-KV: every split after the first starts one key tile early, so "
           "the tile at each split border is counted in two splits (exact with one split)",
           (Edit("decode_forward.py", "first = split * tiles * BLOCK_N",
                 "first = tl.maximum(split * tiles - 1, 0) * BLOCK_N"),)),
    Mutant("kv_cache_page_index_off_by_one",
           "paged KV cache: the block-table lookup reads logical page p + 1 (clamped to the sequence's "
           "last page) for position j in page p",
           (Edit("decode_cache.py", "page_index = positions // page_size",
                 "page_index = tl.minimum(positions // page_size + 1, (length - 1) // page_size)"),)),
    Mutant("kv_cache_new_kv_one_slot_late",
           "kv_cache_attention's append writes k_new, v_new one slot late, at cache_seqlens + 1 + i",
           (Edit("decode_cache.py", "positions = cache_len + tokens", "positions = cache_len + tokens + 1"),)),
    Mutant("kv_cache_band_from_last_token",
           "kv_cache_attention with a window: a row tile's first key tile is taken from its last query "
           "token's band, not its first's, so the earlier new tokens lose the keys at their band's "
           "left edge (exact with one new token)",
           (Edit("decode_forward.py", "band_keys(row_start // group_size, last_token,",
                 "band_keys(last_token, last_token,"),)),
    Mutant("kv_cache_new_values_from_keys",
           "kv_cache_attention's append writes the new tokens' keys into the value cache (k_new where "
           "v_new belongs: a copy-paste slip)",
           (Edit("decode_cache.py", "append_rows(V_NEW, V_CACHE,", "append_rows(K_NEW, V_CACHE,"),)),
    Mutant("kv_cache_split_tiles_rounded_down",
           "kv_cache_attention's split-KV: each split's share of key tiles rounded down, not up, so a "
           "sequence's last tiles fall in no split where its tile count is no multiple of the splits "
           "(exact with one split)",
           (Edit("decode_forward.py", "tiles = tl.cdiv(tl.cdiv(context_len, BLOCK_N), num_splits)",
                 "tiles = tl.maximum(tl.cdiv(context_len, BLOCK_N) // num_splits, 1)"),)),
    Mutant("varlen_lse_head_stride_of_sequence",
           "varlen: the forward strides the heads of the (H, total_q) log-normalizer layout by the "
           "sequence's own query count, not the batch's total (heads and sequences overwrite each "
           "other's rows; right only for a batch of one sequence)",
           (Edit(_FORWARD, "lse_base = row_stats(LSE, batch_head, head, seq_q, q_start, total_q, VARLEN)",
                 "lse_base = row_stats(LSE, batch_head, head, seq_q, q_start, seq_q, VARLEN)"),)),
    Mutant("kv_cache_causal_end_from_first_token",
           "kv_cache_attention, causal: a row tile's last key tile taken from its first new token's "
           "causal end, not its last's, so the later tokens lose the keys past that tile (exact with "
           "one new token)",
           (Edit("decode_forward.py", "hi = causal_key_end(last_token + 1, seq_q, context_len, CAUSAL)",
                 "hi = causal_key_end(first_token + 1, seq_q, context_len, CAUSAL)"),)),
    Mutant("varlen_tile_list_rounded_down",
           "varlen: the host's list of a packed batch's tiles counts each sequence's tiles rounded "
           "down, so a sequence's last, partial tile gets no program (its rows never written; exact "
           "where every length is a multiple of the tile)",
           (Edit("packed_tiles.py", "tiles = range(ceil_div(lengths[sequence], block))",
                 "tiles = range(lengths[sequence] // block)"),)),
    Mutant("kv_cache_gqa_heads_interleaved",
           "kv_cache_attention under GQA: the split kernel takes the query heads of kv head g as g, "
           "g + Hkv, g + 2 Hkv, ... (an interleaved grouping) instead of g * group .. g * group + "
           "group - 1 (exact with one kv head or one query head per kv head)",
           (Edit("decode_forward.py", "    rows, tokens, heads = group_rows(row_start, kv_head, group_size, BLOCK_M)\n",
                 "    rows, tokens, heads = group_rows(row_start, kv_head, group_size, BLOCK_M)\n"
                 "    heads = kv_head + (rows % group_size) * kv_heads\n"),)),
    Mutant("kv_cache_append_page_of_first_token",
           "kv_cache_attention's append looks the block table up once, for the first new token: "
           "new tokens past a page border are written into the first token's page, at their slot "
           "(overwriting cached keys there; exact where the new tokens share a page)",
           (Edit("decode_cache.py", "                               page_size, stride_tp, batch, PAGED)\n"
                                    "    append_rows(K_NEW",
                 "                               page_size, stride_tp, batch, PAGED)\n"
                 "    pages = tl.where(tokens >= 0, tl.sum(tl.where(tokens == 0, pages, 0), axis=0), pages)\n"
                 "    append_rows(K_NEW"),)),
    # ---- robustness fixtures (not counted, never run by the kill table)
    Mutant("crash",
           "out-of-bounds read 2^40 elements past K when Sk == 1: an illegal memory access on a GPU, "
           "SIGSEGV on the interpreter",
           (Edit(_FORWARD, "k_base = K + head_offset(batch, kv_head, stride_kb, stride_kh)",
                 "k_base = K + head_offset(batch, kv_head, stride_kb, stride_kh) + (seq_k == 1) * (1 << 40)"),),
           counted=False),
    Mutant("hang",
           "the forward's key loop advances by 0 when Sq == 1: never ends on single-query cases",
           (Edit(_FORWARD, "    for key_start in tl.range(first_key, key_stop, BLOCK_N, num_stages=STAGES):\n"
                           "        cols = key_start",
                 "    key_start = first_key\n    while key_start < key_stop:\n        cols = key_start"),
            Edit(_FORWARD, "v, acc * rescale[:, None], INTERPRETED)\n",
                 "v, acc * rescale[:, None], INTERPRETED)\n        key_start += BLOCK_N * (seq_q != 1)\n")),
           counted=False),
)

BY_NAME = {mutant.name: mutant for mutant in MUTANTS}
COUNTED = tuple(mutant for mutant in MUTANTS if mutant.counted)
