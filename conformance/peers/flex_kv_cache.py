"""FlexAttention on a contiguous KV cache: `--kernel kv_cache_attention=flex`.

FlashAttention-2's kvcache call (conformance.judging.kv_cache) as FlexAttention expresses it, the
compiled flex of conformance.peers.flex (static shapes, its eager math path refused):

* the cache (B, Smax, Hkv, D) is flex's (B, Hkv, Smax, D) (a view) and q (B, Sq, H, D) its
  (B, H, Sq, D); GQA/MQA through `enable_gqa`;
* k_new/v_new are written into the cache in place at cache_seqlens before attending, with
  torch indexing: what a serving stack built on flex does, since flex itself never writes;
* sequence b attends to its first L_b = cache_seqlens[b] (+ Sq with k_new) keys: a mask_mod
  `kv_idx < L[b]`, with the causal mask and the window aligned bottom-right to L_b (diagonal
  q_idx + L[b] - Sq); softcap and ALiBi a score_mod on that diagonal;
* no pages and no num_splits: flex has neither (declared).
"""

from __future__ import annotations

import functools

import torch

from conformance.peers import flex, masks

CAPABILITY_REASONS = {
    "paged": "flex takes dense (B, H, S, D) keys: no block table",
    "max_splits": "flex chooses its own key tiling: no num_splits",
    "cache_lengths": "a mask_mod kv_idx < L[b], the masks aligned to each sequence's length",
    "cache_dtypes": "flex takes keys and values in the queries' dtype: no 8-bit cache with descales",
}


def capabilities(device: str) -> dict:
    """flex's declaration for kv_cache_attention: flash_attention's, no pages, no forced splits."""
    declared = flex.capabilities(device)
    reasons = {**declared.pop("reasons"), **CAPABILITY_REASONS}
    return {**declared, "paged": False, "max_splits": 0, "cache_dtypes": [], "reasons": reasons}


def _append(cache: torch.Tensor, new: torch.Tensor, starts: torch.Tensor) -> None:
    """cache[b, starts[b] + t] = new[b, t] for every sequence b and new token t."""
    batch, tokens = new.shape[:2]
    rows = torch.arange(batch, device=cache.device)[:, None].expand(batch, tokens)
    positions = starts.to(torch.int64)[:, None] + torch.arange(tokens, device=cache.device)[None, :]
    cache[rows, positions] = new


def _mask_mod(lengths: torch.Tensor, seq_q: int, causal: bool, window):
    left, right = masks.window_bounds(causal, window)

    def within_context(batch, head, q_idx, kv_idx):
        inside = kv_idx < lengths[batch]
        band = masks.in_band(q_idx + lengths[batch] - seq_q, kv_idx, left, right)
        return inside if band is None else inside & band

    return within_context


def kv_cache_attention(q, k_cache, v_cache, cache_seqlens, block_table=None, k_new=None, v_new=None, causal=False,
                       window_size=None, softcap=None, alibi_slopes=None, sm_scale=None, num_splits=0,
                       return_log_normalizer=False):
    """FlashAttention-2's kvcache call on a contiguous cache, by flex (module doc)."""
    if block_table is not None or num_splits:
        raise ValueError("flex: block_table and num_splits are not taken (declared: no pages, no forced splits)")
    flex._refuse_unsupported_cpu(q)
    batch, seq_q, heads, _ = q.shape
    masks.check_options(window_size, softcap, alibi_slopes, heads, batch)
    lengths = cache_seqlens.to(torch.int64)
    if k_new is not None:
        _append(k_cache, k_new, lengths)
        _append(v_cache, v_new, lengths)
        lengths = lengths + seq_q
    capacity = k_cache.shape[1]
    block_mask = flex.load_flex().create_block_mask(_mask_mod(lengths, seq_q, causal, window_size), batch, None,
                                                    seq_q, capacity, device=q.device)
    slopes = masks.slopes_by_batch(alibi_slopes, batch, heads, q.device)
    keys, values = (cache.transpose(1, 2) for cache in (k_cache, v_cache))
    score_mod = flex.score_mod_of(softcap, slopes, lambda batch, q_idx: batch,
                                  lambda batch, q_idx: q_idx + lengths[batch] - seq_q, lambda kv_idx: kv_idx)
    result = flex._run(q.transpose(1, 2), keys, values, block_mask, score_mod, sm_scale, return_log_normalizer)
    if return_log_normalizer:
        out, lse = result
        return out.transpose(1, 2), lse
    return result.transpose(1, 2)


def adapter(variant: str):
    """The operator function `flex` for kv_cache_attention (conformance.peers.flex_adapter)."""
    if variant:
        raise ValueError(f"flex takes no variant, got flex:{variant} (use --kernel kv_cache_attention=flex)")
    flex.load_flex()

    def flex_kv_cache_attention(*args, **kwargs):
        return kv_cache_attention(*args, **kwargs)

    flex_kv_cache_attention.capabilities = functools.partial(capabilities, flex._active_device())
    flex_kv_cache_attention.compile_clock = flex.CLOCK
    return flex_kv_cache_attention
