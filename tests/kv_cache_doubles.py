"""Plain-torch doubles of KV-cache decoding, for testing the harness's kv_cache_attention
judging independently of the Triton kernel:

    --kernel kv_cache_attention=tests.kv_cache_doubles:kv_cache_attention

`kv_cache_attention` has FlashAttention-2's flash_attn_with_kvcache signature: it appends
k_new/v_new through the block table, gathers each sequence's context and computes in float64,
rounding once to q's dtype, so it passes every case. `paged_attention` has FlagAttention's
paged signature (one token per sequence, head-major pages), `split_kv` its dense split-KV one.

Deliberately wrong doubles, each of which must fail where its fault shows:

* reads_past_length    -- each sequence also attends to the cache slot after its context
* appends_one_slot_late -- k_new/v_new written one slot after cache_seqlens (and attended there)
* empty_rows_nan       -- a sequence with an empty context returns NaN instead of 0
"""

from __future__ import annotations

import torch


def _slot(block_table, b: int, position: int, page_size: int):
    if block_table is None:
        return b, position
    return int(block_table[b, position // page_size]), position % page_size


def _capacity(cache, block_table) -> int:
    return cache.shape[1] if block_table is None else block_table.shape[1] * cache.shape[1]


def _append(k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, late: int = 0) -> None:
    page_size = k_cache.shape[1]
    for b in range(k_new.shape[0]):
        for t in range(k_new.shape[1]):
            position = int(cache_seqlens[b]) + t + late
            if position >= _capacity(k_cache, block_table):
                continue
            page, slot = _slot(block_table, b, position, page_size)
            k_cache[page, slot] = k_new[b, t]
            v_cache[page, slot] = v_new[b, t]


def _context(cache, block_table, b: int, length: int) -> torch.Tensor:
    """(Hkv, length, D) of sequence b."""
    rows = [cache[_slot(block_table, b, j, cache.shape[1])] for j in range(length)]
    if not rows:
        return cache.new_zeros((cache.shape[2], 0, cache.shape[3]))
    return torch.stack(rows, dim=1)


def _attend(q, keys, values, causal, window_size, softcap, alibi, sm_scale) -> tuple:
    """One sequence in float64: q (Sq, H, D), keys/values (Hkv, L, D) -> (out (Sq, H, D), lse (H, Sq))."""
    seq_q, heads, dim = q.shape
    length = keys.shape[1]
    group = heads // keys.shape[0]
    keys, values = (t.double().repeat_interleave(group, dim=0) for t in (keys, values))
    scale = dim ** -0.5 if sm_scale is None else sm_scale
    scores = torch.einsum("ihd,hjd->hij", q.double(), keys) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    diagonal = torch.arange(seq_q)[:, None] + length - seq_q
    distance = diagonal - torch.arange(length)[None, :]
    if alibi is not None:
        scores = scores - alibi.double()[:, None, None] * distance.abs()
    visible = torch.ones_like(distance, dtype=torch.bool)
    left, right = window_size if window_size is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left >= 0:
        visible &= distance <= left
    if right >= 0:
        visible &= distance >= -right
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.where(torch.isfinite(lse)[..., None], torch.exp(scores - lse[..., None]), 0.0)
    return torch.einsum("hij,hjd->ihd", weights, values), lse


def _kv_cache(q, k_cache, v_cache, cache_seqlens, *, block_table=None, k_new=None, v_new=None, causal=False,
              window_size=None, softcap=0.0, alibi_slopes=None, sm_scale=None, num_splits=0,
              return_log_normalizer=False, extra_key=0, late=0, empty_value=0.0):
    caches = (k_cache, v_cache)
    if k_new is not None:
        _append(*caches, cache_seqlens, block_table, k_new, v_new, late)
    added = k_new.shape[1] + late if k_new is not None else 0
    outs, lses = [], []
    for b in range(q.shape[0]):
        length = int(cache_seqlens[b]) + added
        seen = min(length + extra_key, _capacity(k_cache, block_table))
        keys, values = (_context(c, block_table, b, seen) for c in caches)
        if late and k_new is not None:  # the new tokens' own slots were skipped
            keep = [j for j in range(seen) if j != int(cache_seqlens[b])]
            keys, values = keys[:, keep], values[:, keep]
        slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b])
        out, lse = _attend(q[b], keys, values, causal, window_size, softcap, slopes, sm_scale)
        if keys.shape[1] == 0 and empty_value:
            out = torch.full_like(out, empty_value)
        outs.append(out)
        lses.append(lse)
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses).float()
    return (out, lse) if return_log_normalizer else out


def kv_cache_attention(q, k_cache, v_cache, cache_seqlens, **options):
    return _kv_cache(q, k_cache, v_cache, cache_seqlens, **options)


def reads_past_length(q, k_cache, v_cache, cache_seqlens, **options):
    return _kv_cache(q, k_cache, v_cache, cache_seqlens, extra_key=1, **options)


def appends_one_slot_late(q, k_cache, v_cache, cache_seqlens, **options):
    return _kv_cache(q, k_cache, v_cache, cache_seqlens, late=1, **options)


def empty_rows_nan(q, k_cache, v_cache, cache_seqlens, **options):
    return _kv_cache(q, k_cache, v_cache, cache_seqlens, empty_value=float("nan"), **options)


def kv_cache_head_major(q, k_cache, v_cache, cache_seqlens, block_table=None, **options):
    """The exact double on head-major pages (num_pages, Hkv, page, D), as declared; it appends
    into them, so the harness must copy what it wrote back before judging the cache."""
    if block_table is None:
        return _kv_cache(q, k_cache, v_cache, cache_seqlens, **options)
    pages = [c.transpose(1, 2) for c in (k_cache, v_cache)]  # views: appends land in the given tensors
    return _kv_cache(q, *pages, cache_seqlens, block_table=block_table, **options)


kv_cache_head_major.capabilities = {"cache_layout": "head_major"}


def kv_cache_bhsd(q, k_cache, v_cache, cache_seqlens, **options):
    """The exact double on (B, H, Sq, D) queries and outputs, as declared."""
    result = _kv_cache(q.transpose(1, 2), k_cache, v_cache, cache_seqlens, **options)
    if isinstance(result, tuple):
        return result[0].transpose(1, 2), result[1]
    return result.transpose(1, 2)


kv_cache_bhsd.capabilities = {"query_layout": "bhsd"}


def kv_cache_sequences(q, k_cache, v_cache, cache_seqlens, **options):
    """The exact double on (B, H, D) queries, one token per sequence: out (B, H, D), lse (B, H)."""
    result = _kv_cache(q.unsqueeze(1), k_cache, v_cache, cache_seqlens, **options)
    if isinstance(result, tuple):
        return result[0][:, 0], result[1][..., 0]
    return result[:, 0]


kv_cache_sequences.capabilities = {"query_layout": "sequences"}


def paged_attention(query, key_cache, value_cache, context_lens, block_tables, attn_scale, max_context_len,
                    num_splits=0):
    """FlagAttention's paged_attention: query (B, H, D), head-major pages (num_pages, Hkv, page, D)."""
    assert max_context_len == int(context_lens.max())
    pages = [c.transpose(1, 2) for c in (key_cache, value_cache)]
    out = _kv_cache(query.unsqueeze(1), *pages, context_lens, block_table=block_tables, sm_scale=attn_scale)
    return out[:, 0]


paged_attention.capabilities = {"kv_signature": "paged_attention", "cache_layout": "head_major"}


def split_kv(q, k, v, causal=False, sm_scale=None):
    """FlagAttention's flash_attention_split_kv: dense q (B, H, Sq, D), k, v (B, Hkv, Sk, D)."""
    caches = [t.transpose(1, 2) for t in (k, v)]
    lengths = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32)
    return _kv_cache(q.transpose(1, 2), *caches, lengths, causal=causal, sm_scale=sm_scale).transpose(1, 2)


split_kv.capabilities = {"kv_signature": "split_kv"}
