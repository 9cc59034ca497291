"""`--kernel OP=flex`: torch's FlexAttention, compiled, for every operator it expresses --
flash_attention and flash_attention_varlen (conformance.peers.flex) and kv_cache_attention on a
contiguous cache (conformance.peers.flex_kv_cache)."""

from __future__ import annotations

from conformance.peers import flex, flex_kv_cache

KV_CACHE_OP = "kv_cache_attention"
OPS = (*flex.OPS, KV_CACHE_OP)


def adapter(op: str, variant: str):
    """The operator function `flex` for `op`; ValueError/ImportError naming what is wrong."""
    if op not in OPS:
        raise ValueError(f"flex implements {', '.join(OPS)} only, not {op}")
    if op == KV_CACHE_OP:
        return flex_kv_cache.adapter(variant)
    return flex.adapter(op, variant)
