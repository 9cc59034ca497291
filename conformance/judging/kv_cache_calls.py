"""The calling conventions of KV-cache decoding kernels, each turned into FlashAttention-2's.

The harness calls every kv_cache_attention implementation one way (conformance.judging.kv_cache):

    f(q (B, Sq, H, D), k_cache, v_cache, cache_seqlens, block_table=, k_new=, v_new=, causal=,
      window_size=, softcap=, alibi_slopes=, num_splits=, return_log_normalizer=)

with page-major pages (num_pages, page_size, Hkv, D). A kernel that declares another
convention (`kv_signature`, `cache_layout` in conformance.running.capabilities) is wrapped here
so that it is called its own way on the same case, without glue of the user's:

    paged_attention  FlagAttention's paged_attention and vLLM's: (query (B, H, D), key_cache,
                     value_cache, context_lens, block_tables, attn_scale, max_context_len,
                     num_splits) -> out (B, H, D): one new token per sequence, a paged cache
    split_kv         FlagAttention's flash_attention_split_kv: (q (B, H, Sq, D), k, v
                     (B, Hkv, Sk, D), causal, sm_scale) -> out (B, H, Sq, D): a contiguous cache
                     whose every sequence is full (no lengths)

What a convention cannot express (lse, appending, the variants, lengths) it declares unsupported
(`IMPLIED`), so those cases never reach the wrapper.

Head-major pages (num_pages, Hkv, page_size, D), declared with `cache_layout`, are handed over
as a head-major copy, and what the call wrote there is copied back before the cache is judged.
The queries' layout, declared with `query_layout`, is "bshd" (B, Sq, H, D), FlashAttention-2's;
"bhsd" (B, H, Sq, D); or "sequences" (B, H, D), one new token per sequence (vLLM's and
FlagAttention's paged kernels): q is handed over and out (and lse) taken back in it.
"""

from __future__ import annotations

import functools

import torch

# What each convention cannot take, as capability keys: merged under a declaration's own keys
# (conformance.running.capabilities.from_mapping), with the reason.
QUERY_LAYOUTS = ("bshd", "bhsd", "sequences")
# What a declared query layout cannot take.
QUERY_IMPLIED = {"bshd": {}, "bhsd": {}, "sequences": dict(max_seq_q=1)}
QUERY_REASON = "query_layout sequences: (B, H, D) queries, one new token per sequence"
# Each convention's own query layout.
SIGNATURE_QUERIES = {"paged_attention": "sequences", "split_kv": "bhsd"}
IMPLIED = {
    "kvcache": {},
    "paged_attention": dict(contiguous=False, max_seq_q=1, lse=False, append=False, window=False,
                            softcap=False, alibi=False, cache_dtypes=()),
    "split_kv": dict(paged=False, cache_lengths=False, max_splits=0, lse=False, append=False,
                     window=False, softcap=False, alibi=False, cache_dtypes=()),
}
IMPLIED_REASON = {
    "paged_attention": "paged_attention takes one query token per sequence, a paged cache in the queries' "
                       "dtype, and no lse, k_new/v_new, window, softcap or ALiBi",
    "split_kv": "flash_attention_split_kv takes dense q, k, v of one dtype: every sequence attends to all "
                "its keys, no pages, splits, lse, k_new/v_new, window, softcap or ALiBi",
}


class _HeadMajor:
    """A paged cache handed over head-major (num_pages, Hkv, page_size, D) when declared so, and
    whatever the call wrote there copied back, so the cache check sees the kernel's writes."""

    def __init__(self, cache_layout: str, block_table, caches):
        self.active = cache_layout == "head_major" and block_table is not None
        self.caches = caches
        self.given = [cache.transpose(1, 2).contiguous() for cache in caches] if self.active else list(caches)

    def __enter__(self):
        return self.given

    def __exit__(self, *exc_info):
        if self.active:
            for cache, given in zip(self.caches, self.given):
                cache.copy_(given.transpose(1, 2))
        return False


def _query_given(q: torch.Tensor, layout: str) -> torch.Tensor:
    """q (B, Sq, H, D) in the declared layout."""
    if layout == "bhsd":
        return q.transpose(1, 2).contiguous()
    return q[:, 0].contiguous() if layout == "sequences" else q


def _taken_back(result, layout: str):
    """out (and lse) of a call in the declared query layout, as FlashAttention-2's: out
    (B, Sq, H, D), lse (B, H, Sq). Anything else is left for the output contract to name."""
    out, *rest = result if isinstance(result, (tuple, list)) else (result,)
    if isinstance(out, torch.Tensor) and layout == "bhsd" and out.dim() == 4:
        out = out.transpose(1, 2)
    if isinstance(out, torch.Tensor) and layout == "sequences" and out.dim() == 3:
        out = out.unsqueeze(1)
        rest = [lse.unsqueeze(-1) if isinstance(lse, torch.Tensor) and lse.dim() == 2 else lse for lse in rest]
    return (out, *rest) if isinstance(result, (tuple, list)) else out


def _kvcache(function, layouts: tuple, q, k_cache, v_cache, cache_seqlens, block_table=None, **options):
    cache_layout, query_layout = layouts
    with _HeadMajor(cache_layout, block_table, (k_cache, v_cache)) as (keys, values):
        result = function(_query_given(q, query_layout), keys, values, cache_seqlens, block_table=block_table,
                          **options)
    return _taken_back(result, query_layout)


def _paged_attention(function, layouts: tuple, q, k_cache, v_cache, cache_seqlens, block_table=None,
                     num_splits=0, causal=False, **_unused):
    """One token per sequence sees its whole context, so causal changes nothing (bottom-right)."""
    scale = q.shape[-1] ** -0.5
    max_context = int(cache_seqlens.max()) if cache_seqlens.numel() else 0
    with _HeadMajor(layouts[0], block_table, (k_cache, v_cache)) as (keys, values):
        out = function(_query_given(q, "sequences"), keys, values, cache_seqlens, block_table, scale, max_context,
                       num_splits)
    return _taken_back(out, "sequences")


def _split_kv(function, layouts: tuple, q, k_cache, v_cache, cache_seqlens, causal=False, **_unused):
    """A contiguous cache of full sequences is the dense (B, Hkv, Sk, D) problem."""
    dense = [cache.transpose(1, 2).contiguous() for cache in (k_cache, v_cache)]
    return _taken_back(function(_query_given(q, "bhsd"), *dense, causal=causal), "bhsd")


_WRAPPERS = {"kvcache": _kvcache, "paged_attention": _paged_attention, "split_kv": _split_kv}


def in_kvcache_form(function, declaration):
    """`function`, called FlashAttention-2's way (module doc), by its declared convention."""
    signature = getattr(declaration, "kv_signature", "kvcache")
    layouts = (getattr(declaration, "cache_layout", "page_major"), getattr(declaration, "query_layout", "bshd"))
    if signature == "kvcache" and layouts == ("page_major", "bshd"):
        return function
    wrapper = functools.partial(_WRAPPERS[signature], function, layouts)
    return functools.update_wrapper(wrapper, function, assigned=("__name__", "__qualname__", "__doc__"))
