"""The catalog's tiers: named lists of grids (see `conformance.cases.catalog.expand_grid`).

    smoke     Triton's CPU interpreter in CI: tiny shapes, every feature once
    standard  the GPU default
    full      standard plus long sequences

FlashAttention-2's variants (window, softcap, ALiBi, flash_attention_varlen) and KV-cache
decoding (conformance.cases.kv_cache_tiers) have grids of their own, appended to each tier so
that the cases before them keep their order.

`cases(name)` expands a tier.
"""

from __future__ import annotations

from conformance.cases import kv_cache_tiers, sweep
from conformance.cases.catalog import BAD_INPUTS, FP8_DTYPES, VARLEN_OP as VARLEN, Case, Grid, expand_tier
from conformance.cases.tier_values import BOTH_DIRECTIONS, CAUSAL_BOTH, DOMINANT, HALF_DTYPES, NEGATIVE, SOFTCAP


# Smoke: Triton's CPU interpreter on a 2-core CI machine. Tiny shapes; 128 = two
# 64-wide interpreter blocks each way, so causal diagonals cross block borders.
# Every feature of every operator appears at least once.
SMOKE: tuple[Grid, ...] = (
    # every direction x half dtype x mask, at a small and a large-ish head dim
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(16, 64), causal=CAUSAL_BOTH,
         shape=[(1, 2, 2, 128, 128)]),
    # ragged: Sq != Sk with partial last blocks; Sq > Sk causal leaves rows with no key
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,), causal=CAUSAL_BOTH,
         shape=[(1, 2, 2, 77, 133), (1, 2, 2, 130, 61)]),
    # GQA 4:1 with batch 2 (batch and head strides)
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(32,), causal=(True,),
         shape=[(2, 4, 1, 96, 96)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(16,), causal=(False,),
         shape=[(1, 2, 2, 128, 128)]),
    # log-sum-exp and total attention outputs, including empty rows
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64,), causal=(True,), lse=(True,),
         shape=[(1, 2, 2, 130, 61)]),
    dict(direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=CAUSAL_BOTH, lse=(True,), total=(True,),
         shape=[(1, 2, 1, 70, 100)]),
    # total attention of batch 2: each batch must read its own log-normalizers
    dict(direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(False,), total=(True,),
         shape=[(2, 2, 1, 40, 72)]),
    # dropout, its mask replayed by the reference
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(32,), causal=(True,), dropout=(0.2,),
         shape=[(1, 2, 1, 96, 128)]),
    # non-power-of-two and the largest head dims
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(96,), causal=(True,), shape=[(1, 2, 2, 80, 80)]),
    dict(direction=("fwd",), dtype=("bf16",), head_dim=(256,), causal=(False,), shape=[(1, 1, 1, 64, 64)]),
    # strided inputs: (B, S, H, D) memory and head-slices of one packed buffer
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(32,), causal=(True,),
         layout=("bshd", "packed"), shape=[(1, 4, 2, 64, 64)]),
    # decode-like: one query, one key
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,), causal=CAUSAL_BOTH,
         shape=[(2, 2, 1, 1, 100), (1, 2, 2, 50, 1)]),
    # piecewise_attention: near band q1.k1, far q2.k2; fp32, MQA decode, a padded head dim
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(32,),
         causal=CAUSAL_BOTH, dist=(24,), shape=[(1, 2, 1, 77, 100)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(16,),
         causal=(True,), dist=(24,), shape=[(1, 2, 2, 77, 100)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(96,),
         causal=(False,), dist=(8,), shape=[(2, 2, 1, 1, 100)]),
    # a NaN or Inf input must propagate (to the positions it reaches in torch) and never crash
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(32,), causal=CAUSAL_BOTH,
         bad_input=BAD_INPUTS, shape=[(1, 2, 1, 64, 96)]),
    dict(direction=("fwd",), dtype=("bf16",), head_dim=(32,), causal=(True,), lse=(True,), total=(True,),
         bad_input=("nan",), shape=[(1, 2, 1, 64, 96)]),
    dict(op=("piecewise_attention",), direction=("bwd",), dtype=("bf16",), head_dim=(32,), causal=(True,),
         dist=(16,), bad_input=("inf",), shape=[(1, 2, 1, 64, 96)]),
    # fp8 needs fp8 tensor cores: `unsupported` on the interpreter, judged on sm_89+
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(32,), causal=(True,), shape=[(1, 2, 1, 77, 100)]),
    # every softmax input near -1000: exp2 underflows for whole rows unless the running
    # max starts at -inf and is subtracted before exponentiating (piecewise_attention: in
    # both its score products, q1.k1 near and q2.k2 far)
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,), causal=(True,), lse=(False,),
         values=(NEGATIVE,), shape=[(1, 2, 1, 77, 133)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(32,),
         causal=(True,), dist=(24,), values=(NEGATIVE,), shape=[(1, 2, 1, 77, 100)]),
)

# Standard: the GPU default. Ragged lengths (509, 1000), GQA, Sq != Sk both ways
# (Sq > Sk causal has empty rows) and a single-query decode shape.
STANDARD_SHAPES = [
    (2, 8, 8, 128, 128),
    (1, 8, 8, 509, 509),
    (2, 4, 2, 1000, 1000),
    (1, 8, 2, 509, 1024),
    (1, 4, 4, 1024, 509),
    (1, 16, 16, 2048, 2048),
    (2, 8, 1, 1, 1000),  # MQA decode
]
FEATURE_SHAPES = [(1, 8, 2, 509, 1024), (2, 4, 4, 1000, 1000)]
STANDARD: tuple[Grid, ...] = (
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(16, 32, 64, 128), causal=CAUSAL_BOTH,
         shape=STANDARD_SHAPES),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64, 128), causal=CAUSAL_BOTH,
         shape=[(2, 8, 8, 128, 128), (1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, lse=(True,),
         shape=[(1, 8, 2, 509, 1024), (1, 4, 4, 1024, 509)]),
    # few queries, many keys: the row sum runs over hundreds of key blocks, where
    # fp32 accumulation error in the log-normalizer shows
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, lse=(True,),
         shape=[(1, 4, 4, 256, 16384)]),
    # the larger and non-power-of-two head dims
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(96, 192, 256), causal=CAUSAL_BOTH,
         shape=[(1, 8, 2, 509, 1024), (2, 4, 4, 1000, 1000)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, total=(True,),
         shape=FEATURE_SHAPES),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH,
         dropout=(0.1, 0.5), shape=FEATURE_SHAPES),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH,
         layout=("bshd", "packed"), shape=[(2, 8, 2, 509, 509), (1, 8, 8, 1000, 1000)]),
    # decode with a single key, and batch x heads above the 65,535 grid-axis limit
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH,
         shape=[(2, 8, 2, 64, 1)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(16,), causal=(False,),
         shape=[(35, 2048, 2048, 16, 16)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128),
         causal=CAUSAL_BOTH, dist=(128,), shape=FEATURE_SHAPES),
    # piecewise_attention over the rest of flash_attention's axes: fp32, every other head
    # dim, MQA decode, Sq > Sk (empty causal rows), strided layouts
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,),
         causal=CAUSAL_BOTH, dist=(128,), shape=[(1, 8, 2, 509, 1024)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES,
         head_dim=(16, 32, 96, 192, 256), causal=(True,), dist=(64,), shape=[(1, 8, 2, 509, 1024)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,),
         causal=CAUSAL_BOTH, dist=(128,), shape=[(2, 8, 1, 1, 1000), (1, 4, 4, 1024, 509)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,),
         causal=(True,), dist=(128,), layout=("bshd", "packed"), shape=[(2, 8, 2, 509, 509)]),
    # fp8 forward (sm_89+): every head dim class (16 is padded to fp8's 32-wide MMA), decode
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(16, 64, 128, 256), causal=CAUSAL_BOTH,
         shape=[(2, 8, 8, 128, 128), (1, 8, 2, 509, 1024), (1, 4, 4, 1024, 509), (2, 8, 1, 1, 1000)]),
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, lse=(True,),
         shape=[(1, 8, 2, 509, 1024)]),
    # every feature in fp32 too: there a small systematic error (a dropped pair that still
    # leaks a little gradient, a row sum off by one term) cannot hide under the rounding
    # noise of a half-precision input
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=CAUSAL_BOTH, dropout=(0.1,),
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=("fp32",), head_dim=(64,), causal=CAUSAL_BOTH, lse=(True,), total=(True,),
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=(True,), layout=("bshd", "packed"),
         shape=[(2, 8, 2, 509, 509)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=(True,), bad_input=BAD_INPUTS,
         shape=[(1, 8, 2, 509, 1024)]),
    # NaN / Inf inputs: propagated as torch propagates them, judged elsewhere by the rule
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH,
         bad_input=BAD_INPUTS, shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lse=(True,), total=(True,),
         bad_input=BAD_INPUTS, shape=[(1, 4, 4, 1024, 509)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(64,),
         causal=(True,), dist=(128,), bad_input=BAD_INPUTS, shape=[(1, 8, 2, 509, 1024)]),
    # inputs that stress the fast paths: every softmax input near -1000 (whole rows
    # underflow unless the running max starts at -inf), and rows dominated by one key
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH,
         values=(NEGATIVE,), shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), lse=(True,),
         values=(NEGATIVE,), shape=[(1, 4, 4, 256, 16384)]),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH,
         values=(DOMINANT,), shape=[(1, 8, 2, 509, 1024)]),
    # the same for piecewise_attention, whose two score products are both shaped (a handful
    # of cases: its online softmax is flash_attention's, only the scores differ)
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,),
         causal=CAUSAL_BOTH, dist=(128,), values=(NEGATIVE,), shape=[(1, 8, 2, 509, 1024)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(64,),
         causal=(False,), dist=(128,), values=(DOMINANT,), shape=[(1, 8, 2, 509, 1024)]),
)

# Long sequences, where the reference must be chunked and accumulation errors grow.
LONG: tuple[Grid, ...] = (
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH,
         shape=[(1, 16, 16, seq, seq) for seq in (8192, 32768)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, lse=(True,),
         shape=[(1, 16, 16, seq, seq) for seq in (8192, 32768)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,), causal=CAUSAL_BOTH, dropout=(0.1,),
         shape=[(1, 16, 16, 16384, 16384)]),
    dict(direction=("fwd",), dtype=("bf16",), head_dim=(128,), causal=CAUSAL_BOTH, total=(True,),
         shape=[(1, 16, 16, 32768, 32768)]),
    dict(op=("piecewise_attention",), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,),
         causal=CAUSAL_BOTH, dist=(4096,), shape=[(1, 16, 16, 32768, 32768)]),
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lse=(True,),
         shape=[(1, 16, 16, 32768, 32768)]),
)

# --------------------------------------------------------------------------- FlashAttention-2's variants
# Sliding window (left, right), softcap, ALiBi slopes (H,) / (B, H), and the variable-length
# operator (conformance.cases.variants). Windows: (128, 0) a causal-style local window,
# (-1, 64) unbounded left with 64 keys of look-ahead, (256, 256) symmetric, (0, 0) one key per
# row (the gradients cancel exactly), (32, 0) on Sq > Sk (noncausal rows that see no key).

# Smoke: one case per variant and per interaction that could break alone, interpreter-sized.
SMOKE_VARIANTS: tuple[Grid, ...] = (
    # window + causal + Sq != Sk (the causal mask clips the window's right side to 0)
    dict(direction=("bwd",), dtype=("fp16",), head_dim=(32,), causal=(True,), window=((24, 8),),
         shape=[(1, 2, 1, 77, 133)]),
    # a window that leaves the first 60 rows without keys (noncausal, Sq > Sk): out 0, lse -inf
    dict(direction=("fwd",), dtype=("bf16",), head_dim=(32,), causal=(False,), lse=(True,), window=((8, 0),),
         shape=[(1, 2, 2, 100, 40)]),
    # window (0, 0): every row sees its diagonal key alone
    dict(direction=("bwd",), dtype=("fp16",), head_dim=(32,), causal=(False,), window=((0, 0),),
         shape=[(1, 2, 2, 64, 64)]),
    # softcap in bf16 at logits of std 64: tanh saturates, most scores sit near +-c
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(32,), causal=(True,), softcap=(SOFTCAP,),
         values=(DOMINANT,), shape=[(1, 2, 2, 96, 96)]),
    # ALiBi with GQA (slopes per query head), and per-sequence slopes (B, H)
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(32,), causal=(True,), alibi=("h",),
         shape=[(1, 4, 2, 64, 100)]),
    dict(direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(False,), lse=(True,), alibi=("bh",),
         shape=[(2, 4, 1, 64, 80)]),
    # every variant at once in fp32, where a small systematic error cannot hide
    dict(direction=("fwd",), dtype=("fp32",), head_dim=(16,), causal=(True,), lse=(True,), window=((32, 0),),
         softcap=(20.0,), alibi=("h",), shape=[(1, 2, 2, 96, 128)]),
    # varlen: 8 sequences of mixed lengths (a sequence without keys, one without queries, one
    # query, one key), with lse; with a causal window (backward); with dropout and lse. The
    # last two with every softmax input near -1000, as every operator meets it in smoke.
    dict(op=(VARLEN,), direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(True,), lse=(True,),
         lens=("mixed",), shape=[(8, 2, 1, 48, 64)]),
    dict(op=(VARLEN,), direction=("bwd",), dtype=("bf16",), head_dim=(32,), causal=(True,), window=((16, 0),),
         values=(NEGATIVE,), lens=("mixed",), shape=[(8, 2, 2, 64, 48)]),
    dict(op=(VARLEN,), direction=("fwd",), dtype=("fp16",), head_dim=(32,), causal=(False,), dropout=(0.2,),
         lse=(True,), values=(NEGATIVE,), lens=("mixed",), shape=[(6, 2, 1, 64, 80)]),
)

WINDOWS = ((128, 0), (-1, 64))
VARLEN_SHAPES = [(32, 8, 2, 509, 1024), (1000, 4, 1, 128, 128)]  # 32 long sequences; 1,000 short ones
STANDARD_VARIANTS: tuple[Grid, ...] = (
    # window: both directions, half dtypes, masks and Sq != Sk both ways
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, window=WINDOWS,
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH,
         window=((256, 256), (0, 0), (32, 0)), shape=[(1, 4, 4, 1024, 509)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lse=(True,),
         window=((128, 0), (0, 0)), shape=[(1, 4, 4, 1024, 509)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=CAUSAL_BOTH, window=((128, 0),),
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(16, 32, 96, 256), causal=(True,),
         window=((128, 0),), shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=(False,), window=((256, 0),),
         shape=[(2, 8, 1, 1, 1000)]),
    # softcap: every dtype; large logits (most scores capped); lse
    dict(direction=BOTH_DIRECTIONS, dtype=("fp16", "bf16", "fp32"), head_dim=(64, 128), causal=CAUSAL_BOTH,
         softcap=(SOFTCAP,), shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH, softcap=(SOFTCAP,),
         values=(DOMINANT,), shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lse=(True,),
         softcap=(SOFTCAP,), shape=[(1, 4, 4, 1024, 509)]),
    # ALiBi with GQA, slopes (H,) and (B, H); fp32; MQA decode and Sq > Sk with lse
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH, alibi=("h", "bh"),
         shape=[(2, 8, 2, 509, 1024)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=CAUSAL_BOTH, alibi=("bh",),
         shape=[(2, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH, lse=(True,), alibi=("bh",),
         shape=[(2, 8, 1, 1, 1000), (1, 4, 4, 1024, 509)]),
    # all three together
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(128,), causal=(True,), window=((256, 0),),
         softcap=(SOFTCAP,), alibi=("h",), shape=[(1, 8, 2, 509, 1024)]),
    # fp8 forward with each variant (sm_89+)
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(128,), causal=(True,), window=((128, 0),),
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(128,), causal=(True,), softcap=(SOFTCAP,),
         shape=[(1, 8, 2, 509, 1024)]),
    dict(direction=("fwd",), dtype=FP8_DTYPES, head_dim=(128,), causal=(True,), alibi=("h",),
         shape=[(1, 8, 2, 509, 1024)]),
    # varlen: 32 and 1,000 sequences of mixed lengths (0 and 1 among them), equal and paired
    # lengths, fp32, other head dims, with a causal window, dropout, lse, softcap and ALiBi
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64, 128), causal=CAUSAL_BOTH,
         lens=("mixed",), shape=VARLEN_SHAPES),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH,
         lens=("equal", "paired"), shape=[(16, 8, 2, 512, 512)]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("fp32",), head_dim=(64,), causal=CAUSAL_BOTH,
         lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(32, 96, 256), causal=(True,),
         lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(64,), causal=(True,),
         window=((128, 0), (64, 64)), lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=("fwd",), dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH, dropout=(0.1,),
         lse=(True,), lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=("bwd",), dtype=HALF_DTYPES, head_dim=(64,), causal=CAUSAL_BOTH, dropout=(0.1,),
         lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=("fwd",), dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH, lse=(True,),
         lens=("mixed",), shape=VARLEN_SHAPES),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(64,), causal=(True,),
         softcap=(SOFTCAP,), lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(64,), causal=(True,),
         alibi=("bh",), lens=("mixed",), shape=VARLEN_SHAPES[:1]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("fp16",), head_dim=(64,), causal=(True,),
         values=(NEGATIVE, DOMINANT), lens=("mixed",), shape=VARLEN_SHAPES[:1]),
)

# Long: windows over 8k and 16k tokens (the reference visits only the keys a block may see).
LONG_VARIANTS: tuple[Grid, ...] = (
    dict(direction=BOTH_DIRECTIONS, dtype=HALF_DTYPES, head_dim=(128,), causal=CAUSAL_BOTH,
         window=((1024, 0), (256, 256)), shape=[(1, 16, 16, 8192, 8192)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,), causal=CAUSAL_BOTH,
         window=((1024, 0), (256, 256)), shape=[(1, 16, 16, 16384, 16384)]),
    dict(direction=("fwd",), dtype=("bf16",), head_dim=(128,), causal=(True,), lse=(True,), window=((1024, 0),),
         shape=[(1, 16, 16, 16384, 16384)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,), causal=(True,), softcap=(SOFTCAP,),
         shape=[(1, 16, 16, 16384, 16384)]),
    dict(direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,), causal=(True,), alibi=("h",),
         shape=[(1, 16, 16, 16384, 16384)]),
    dict(op=(VARLEN,), direction=BOTH_DIRECTIONS, dtype=("bf16",), head_dim=(128,), causal=(True,),
         window=(None, (1024, 0)), lens=("mixed",), shape=[(8, 16, 16, 8192, 8192)]),
)

TIERS: dict[str, tuple[Grid, ...]] = {
    "smoke": SMOKE + SMOKE_VARIANTS + kv_cache_tiers.SMOKE,
    "standard": STANDARD + STANDARD_VARIANTS + kv_cache_tiers.STANDARD,
    "full": STANDARD + STANDARD_VARIANTS + kv_cache_tiers.STANDARD + LONG + LONG_VARIANTS + kv_cache_tiers.LONG,
}


# Every tier name a run takes: the catalog's and the sweeps, which depend on the target.
TIER_NAMES = (*TIERS, *sweep.SCOPES)


def cases(tier: str) -> list[Case]:
    """The cases of a named tier (see `TIERS`); ValueError for an unknown name."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; known tiers: {', '.join(TIERS)}")
    return expand_tier(TIERS[tier])


def resolve_tier(tier: str, profile) -> str:
    """`auto` means the profile's default tier; any other name is returned as is."""
    return profile.default_tier if tier == "auto" else tier


def select(tier: str, case_ids, profile) -> tuple[str, list[Case]]:
    """What a run checks: the given case ids if any (tier ignored), else the tier's
    cases (a sweep tier's are the profile's target's, conformance.cases.sweep).
    Returns (label for env.json, cases); ValueError on a bad tier or id."""
    if case_ids:
        selected = [Case.from_id(case_id) for case_id in case_ids]
        return "cases", list({case.id: case for case in selected}.values())
    name = resolve_tier(tier, profile)
    if name in sweep.SCOPES:
        return name, sweep.sweep_cases(name, profile.target, profile.dtypes)
    return name, cases(name)
