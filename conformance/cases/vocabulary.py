"""The words of the case catalog: operators, directions, dtypes, layouts, the length
patterns and block-table orders, the kernels each call launches, the planted bad inputs and
the value and configuration patterns -- what conformance.cases.catalog builds ids from and
conformance.cases.validity checks cases against.

This module must not import torch (see conformance.cases.catalog)."""

from conformance.bundled.kernels.targets import FP8, HIGH_PRECISION
from conformance.bundled.kernels.tuning_space import CONFIG_PATTERN

OPS = ("flash_attention", "piecewise_attention", "flash_attention_varlen", "kv_cache_attention")
# The operators of FlashAttention-2's attention variants (window, softcap, ALiBi): flash_attention,
# its variable-length (packed) form, whose case's `batch` counts sequences, and KV-cache decoding.
FLASH_OPS = ("flash_attention", "flash_attention_varlen", "kv_cache_attention")
VARLEN_OP = "flash_attention_varlen"
# KV-cache decoding (FlashAttention-2's flash_attn_with_kvcache): Sq new query tokens of each of
# `batch` sequences against that sequence's cache of at most Sk keys (conformance.cases.kv_cache).
KV_CACHE_OP = "kv_cache_attention"
# The length patterns of a KV-cache case's cache lengths (conformance.cases.variants).
KV_CACHE_LENGTHS = ("equal", "mixed", "nonempty")
# The block-table orders of a paged cache (conformance.judging.kv_cache): pages in a seeded
# shuffle, or a prefix of pages shared by several sequences (a common prompt).
BLOCK_TABLES = ("shuffled", "shared")
DIRECTIONS = ("fwd", "bwd")
DTYPES = HIGH_PRECISION + FP8
# 8-bit inputs: forward only (no backward kernel), output in fp16.
FP8_DTYPES = FP8
# Memory layouts of the inputs, all viewed as (batch, heads, seqlen, head_dim):
# bhsd contiguous; bshd = (batch, seqlen, heads, head_dim) memory; packed = the
# tensors of one sequence length are head-slices of one (batch, seqlen, heads, head_dim) buffer.
LAYOUTS = ("bhsd", "bshd", "packed")
# A `values` token: a distribution spec such as negative:1000 (conformance.cases.distributions).
VALUES_PATTERN = r"[a-z]+:[0-9][0-9.e+]*"
# A `config` token's value: a launch-table kernel and one of its configurations.
CONFIG_VALUE_PATTERN = rf"[a-z_]+:{CONFIG_PATTERN}"
# The bundled kernels a case's call launches (the launch-table names, kernels.tuning):
# the kernels whose launch configuration a case's `config` may set.
KERNELS_LAUNCHED = {
    ("flash_attention", "fwd"): ("fwd", "total"),
    ("flash_attention", "bwd"): ("bwd_preprocess", "bwd_dkdv", "bwd_dq"),
    ("piecewise_attention", "fwd"): ("piecewise_fwd",),
    ("piecewise_attention", "bwd"): ("bwd_preprocess", "piecewise_bwd_dkdv", "piecewise_bwd_dq"),
    # The packed batch runs the dense operator's kernels (kernels.sequences); its forward takes
    # the "fwd.varlen" table where a target has one, and a `cfg=fwd:...` overrides both.
    ("flash_attention_varlen", "fwd"): ("fwd",),
    ("flash_attention_varlen", "bwd"): ("bwd_preprocess", "bwd_dkdv", "bwd_dq"),
    ("kv_cache_attention", "fwd"): ("decode_split", "decode_merge"),
    ("kv_cache_attention", "bwd"): (),
}
# Values `bad_input` can plant in the first query tensor (see conformance.cases.inputs).
BAD_INPUTS = ("nan", "inf")
