"""kv_cache_attention's grids, appended to each tier (conformance.cases.tiers).

A shape is (sequences, heads, kv heads, new tokens Sq, cache capacity Sk); `lens=mixed` draws
each sequence's context length in [0, Sk] (in [Sq, Sk] with `append`) and plants the full
cache, an empty one, one token and one just past a power of two; `lens=nonempty` the same
without the empty one (conformance.cases.variants). Pages of 1 to 256 keys, shuffled or with a shared prefix;
forced key splits 1 to 16 next to the kernel's heuristic, more splits than tiles leaving
some empty; GQA ratios 1 to 16 and MQA; new tokens appended to the cache; 8-bit caches
(`unsupported` on backends without fp8).
"""

from __future__ import annotations

from conformance.cases.catalog import KV_CACHE_OP, Grid
from conformance.cases.tier_values import CAUSAL_BOTH, DOMINANT, HALF_DTYPES, NEGATIVE, SOFTCAP

KV = (KV_CACHE_OP,)
PAGE_SIZES = (None, 1, 16, 64, 128, 256)  # None: a contiguous cache
SPLITS = (1, 2, 3, 4, 8, 16)

# A decode batch: 8 sequences, 32 query heads over 8 kv heads, contexts up to 4k.
DECODE = (8, 32, 8)
GQA_RATIOS = [(4, 16, 16), (4, 32, 8), (4, 32, 4), (4, 32, 2), (4, 32, 1)]  # 1, 4, 8, 16, MQA


def _shapes(heads, sq_values, seq_k):
    return [(*heads, sq, seq_k) for sq in sq_values]


# Interpreter-sized: small caches, two page sizes and a contiguous cache, two forced split
# counts and the heuristic, appending, a shared prefix, the variants once in fp32.
SMOKE: tuple[Grid, ...] = (
    # MQA, 4 new tokens, 5 sequences (an empty cache, one key, a full one), 3 splits, every
    # softmax input near -1000 (as every operator meets it in smoke)
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(True,), lse=(True,),
         values=(NEGATIVE,), lens=("mixed",), splits=(3,), shape=[(5, 4, 1, 4, 48)]),
    # GQA 4:1, one token, pages of one key in a shuffled table, the heuristic's splits
    dict(op=KV, direction=("fwd",), dtype=("bf16",), head_dim=(64,), causal=(False,),
         lens=("mixed",), page=(1,), table=("shuffled",), shape=[(2, 8, 2, 1, 60)]),
    # new tokens appended into pages of 16 whose prefix three sequences share; 2 splits; no
    # causal mask, so only the lengths keep each last page's slots past L out
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(False,), lse=(True,),
         lens=("mixed",), page=(16,), table=("shared",), append=(True,), splits=(2,),
         shape=[(5, 2, 2, 2, 80)]),
    # window, softcap and ALiBi at once in fp32, appended to a contiguous cache
    dict(op=KV, direction=("fwd",), dtype=("fp32",), head_dim=(16,), causal=(True,), lse=(True,),
         window=((16, 0),), softcap=(20.0,), alibi=("h",), lens=("mixed",), append=(True,),
         shape=[(2, 2, 1, 4, 64)]),
)

STANDARD: tuple[Grid, ...] = (
    # every page size and the contiguous cache, one and four new tokens, both masks
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH,
         lens=("mixed",), page=PAGE_SIZES, shape=_shapes(DECODE, (1, 4), 4096)),
    # shuffled and shared block tables
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,),
         lens=("mixed",), page=(16, 64), table=("shuffled", "shared"), shape=_shapes(DECODE, (4,), 4096)),
    # GQA ratios 1, 4, 8, 16 and MQA, paged and contiguous
    dict(op=KV, direction=("fwd",), dtype=("bf16",), head_dim=(128,), causal=(True,), lens=("mixed",),
         page=(None, 16), shape=[(*heads, sq, 2048) for heads in GQA_RATIOS for sq in (1, 4)]),
    # every forced split count, up to 16 new tokens, with lse (an empty split's lse is -inf)
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(128,), causal=(True,), lse=(True,),
         lens=("mixed",), page=(None, 16), splits=SPLITS, shape=_shapes(DECODE, (16,), 4096)),
    # one new token per sequence against caches never empty (a serving engine's decode step has
    # its own token cached): kernels that cannot take an empty cache are judged on these
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lens=("nonempty",),
         page=(16, 64, 256), shape=[(8, 32, 8, 1, 4096), (4, 32, 1, 1, 2048)]),
    # new tokens written into the cache, 1 to 16 of them
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lens=("mixed",),
         page=(None, 16, 64), append=(True,), shape=_shapes(DECODE, (1, 4, 16), 4096)),
    # equal lengths (every cache full), fp32, other head dims
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lens=("equal",),
         page=(None, 16), shape=_shapes(DECODE, (4,), 2048)),
    dict(op=KV, direction=("fwd",), dtype=("fp32",), head_dim=(64, 128), causal=CAUSAL_BOTH, lse=(True,),
         lens=("mixed",), page=(None, 16), shape=_shapes(DECODE, (4,), 2048)),
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(32, 64, 96, 256), causal=(True,),
         lens=("mixed",), page=(16,), shape=_shapes(DECODE, (4,), 2048)),
    # the variants: windows of 256 and 8 keys, softcap, ALiBi (slopes (H,) and (B, H))
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lse=(True,),
         window=((256, 0), (8, 0)), lens=("mixed",), page=(16,), shape=_shapes(DECODE, (4,), 4096)),
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), softcap=(SOFTCAP,),
         lens=("mixed",), page=(16,), append=(True,), shape=_shapes(DECODE, (4,), 4096)),
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), alibi=("h", "bh"),
         lens=("mixed",), page=(16,), shape=_shapes(DECODE, (4,), 4096)),
    # softmax inputs near -1000 and dominated rows
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(128,), causal=(True,), values=(NEGATIVE, DOMINANT),
         lens=("mixed",), page=(16,), splits=(0, 4), shape=_shapes(DECODE, (4,), 4096)),
    # 8-bit caches with per-tensor descales, read by fp16 and bf16 queries (GPUs with fp8)
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lens=("mixed",),
         page=(16,), cache_dtype=("fp8e4m3", "fp8e5m2"), shape=_shapes(DECODE, (1, 4), 4096)),
    dict(op=KV, direction=("fwd",), dtype=("fp16",), head_dim=(128,), causal=(True,), lse=(True,), lens=("mixed",),
         page=(None,), append=(True,), splits=(4,), cache_dtype=("fp8e4m3",), shape=_shapes(DECODE, (4,), 4096)),
    # a serving batch: 128 sequences of one token
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lens=("mixed",),
         page=(16,), shape=[(128, 32, 8, 1, 1024)]),
)

# Long contexts: caches of 32k to 128k keys.
LONG: tuple[Grid, ...] = (
    dict(op=KV, direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lens=("mixed",),
         page=(16, 64), shape=[(4, 32, 8, 1, 131072), (4, 32, 8, 4, 65536)]),
    dict(op=KV, direction=("fwd",), dtype=("bf16",), head_dim=(128,), causal=(True,), lse=(True,),
         lens=("equal",), page=(None,), splits=(0, 16), shape=[(2, 32, 8, 4, 131072)]),
)
