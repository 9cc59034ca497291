"""`flash_attention_varlen`: FlashAttention-2's variable-length (packed) batch.

The sequences of the batch lie one after another along the token axis; each is its own
attention problem, exactly the dense operator's on that sequence alone.  The same
kernels run it (kernels.sequences: one program per (tile, sequence x head) of the tiles
that hold tokens, kernels.packed_tiles; no padding), through the dense operator's launches
and autograd function (kernels.flash).
"""

from __future__ import annotations

import math

from .dropout import dropout_keep_mask, dropout_params
from .flash import _FlashAttention, check_inputs, contiguous
from .problem import AttentionProblem, resolve_window
from .validation import (
    check_alibi_slopes,
    check_cu_seqlens,
    check_flag,
    check_max_seqlen,
    check_sm_scale,
    check_softcap,
    check_window_size,
)


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           causal=False, sm_scale=None, return_log_normalizer=False,
                           dropout_p=0.0, dropout_seed=None,
                           window_size=None, softcap=None, alibi_slopes=None):
    """Attention over a packed batch of sequences of different lengths, with autograd.

    q: (total_q, heads, head_dim); k, v: (total_k, kv_heads, head_dim), kv_heads dividing
    heads; dtypes and head dims as flash_attention's.
    cu_seqlens_q, cu_seqlens_k: int32 (B + 1,) on q's device, the cumulative lengths
        (0, len_0, len_0 + len_1, ..., total): sequence b is q[cu_q[b]:cu_q[b+1]]
        against k, v[cu_k[b]:cu_k[b+1]].  Sequences of 0 or 1 tokens are valid.
    max_seqlen_q, max_seqlen_k: ints at least every sequence's length.
    causal, sm_scale, window_size, softcap, alibi_slopes: as flash_attention's, per
        sequence (masks bottom-right aligned to each sequence's own lengths); ALiBi
        slopes of shape (heads,) or (B, heads).
    return_log_normalizer: also return lse, shape (heads, total_q) fp32 (FlashAttention-2's
        varlen layout), -inf for rows that see no key.
    dropout_p, dropout_seed: as flash_attention's; the keep decision for (sequence b,
        head h, row i, key j) of the sequence is the dense operator's for (batch b, head h,
        row i, key j), so `kernels.dropout_keep_mask(seed, p, B, heads, max_seqlen_q,
        max_seqlen_k, ...)` replays it.

    Returns out (total_q, heads, head_dim), like q (fp16 for fp8 inputs), or (out, lse).
    There is no total attention for packed batches.
    """
    check_inputs(q, k, v, packed=True)
    offsets_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], q.device)
    offsets_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], q.device)
    if len(offsets_k) != len(offsets_q):
        raise ValueError(f"cu_seqlens_k: expected as many offsets as cu_seqlens_q ({len(offsets_q)}: "
                         f"one sequence of k per sequence of q), got {len(offsets_k)}")
    max_seqlen_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, offsets_q)
    max_seqlen_k = check_max_seqlen("max_seqlen_k", max_seqlen_k, offsets_k)
    check_flag("causal", causal)
    sm_scale = 1.0 / math.sqrt(q.shape[2]) if sm_scale is None else check_sm_scale(sm_scale)
    check_flag("return_log_normalizer", return_log_normalizer)
    dropout = dropout_params(dropout_p, dropout_seed)
    batch = len(offsets_q) - 1
    total_q, heads, head_dim = q.shape
    causal, band = resolve_window(check_window_size(window_size), causal, max_seqlen_q, max_seqlen_k)
    problem = AttentionProblem(batch, heads, k.shape[1], max_seqlen_q, max_seqlen_k, head_dim, causal,
                               sm_scale, dropout, band=band, softcap=check_softcap(softcap),
                               alibi_slopes=contiguous(check_alibi_slopes(alibi_slopes, batch, heads, q.device)),
                               cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, total_q=total_q,
                               offsets_q=offsets_q, offsets_k=offsets_k)

    out, lse = _FlashAttention.apply(q, k, v, problem)
    return (out, lse) if return_log_normalizer else out


# How a harness replays this operator's dropout, as for flash_attention: the mask of the
# dense (B, H, max_seqlen_q, max_seqlen_k) problem, sequence b being batch b.
flash_attention_varlen.dropout_keep_mask = dropout_keep_mask
