"""What makes a `Case` well formed: each field in its range and the combinations an operator
can take (the variants FlashAttention-2's operators add, KV-cache decoding's own fields, a
launch configuration the call really launches). `problem` returns the first thing wrong, in
one line; `Case` refuses to exist with one (conformance.cases.catalog).

This module must not import torch (see conformance.cases.catalog)."""

from __future__ import annotations

import re

from conformance.cases.variants import LENGTH_PATTERNS
from conformance.cases.vocabulary import (
    BAD_INPUTS,
    BLOCK_TABLES,
    CONFIG_VALUE_PATTERN,
    DIRECTIONS,
    DTYPES,
    FLASH_OPS,
    FP8_DTYPES,
    KERNELS_LAUNCHED,
    KV_CACHE_LENGTHS,
    KV_CACHE_OP,
    LAYOUTS,
    OPS,
    VALUES_PATTERN,
    VARLEN_OP,
)


def problem(case) -> str | None:
    """What is wrong with `case` (a conformance.cases.catalog.Case), in one line, or None."""
    if case.op not in OPS:
        return f"unknown op {case.op!r} (known: {', '.join(OPS)})"
    if case.direction not in DIRECTIONS:
        return f"direction must be one of {', '.join(DIRECTIONS)}, got {case.direction!r}"
    if case.dtype not in DTYPES:
        return f"dtype must be one of {', '.join(DTYPES)}, got {case.dtype!r}"
    sizes = ("head_dim", "batch", "heads", "kv_heads", "seq_q", "seq_k")
    for name in sizes:
        value = getattr(case, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{name} must be a positive int, got {value!r}"
    if not isinstance(case.seed, int) or case.seed < 0:
        return f"seed must be a non-negative int, got {case.seed!r}"
    if case.heads % case.kv_heads:
        return f"kv_heads ({case.kv_heads}) must divide heads ({case.heads})"
    if (case.lse or case.total) and case.direction != "fwd":
        return "lse and total (extra forward outputs) are forward-only features"
    if not isinstance(case.dropout, float) or not 0.0 <= case.dropout < 1.0:
        return f"dropout must be a float in [0, 1), got {case.dropout!r}"
    if case.layout not in LAYOUTS:
        return f"layout must be one of {', '.join(LAYOUTS)}, got {case.layout!r}"
    if (case.op == "piecewise_attention") != (case.dist is not None):
        return "dist (distance threshold) is required by piecewise_attention and only by it"
    if case.dist is not None and (not isinstance(case.dist, int) or case.dist < 0):
        return f"dist must be a non-negative int, got {case.dist!r}"
    if case.bad_input not in (None, *BAD_INPUTS):
        return f"bad_input must be one of {', '.join(BAD_INPUTS)} or None, got {case.bad_input!r}"
    if case.values is not None and not re.fullmatch(VALUES_PATTERN, str(case.values)):
        return f"values must be a distribution spec such as negative:1000, got {case.values!r}"
    if case.config is not None:
        problem = _config_problem(case)
        if problem:
            return problem
    if case.dtype in FP8_DTYPES and (case.direction != "fwd" or case.op != "flash_attention"):
        return "fp8 dtypes are for flash_attention's forward only"
    if case.op == "piecewise_attention" and (case.lse or case.total or case.dropout):
        return "piecewise_attention has no lse, total or dropout"
    return _variant_problem(case)


def _variant_problem(case) -> str | None:
    """What is wrong with a case's FlashAttention-2 variant fields (window, softcap, alibi, lens)."""
    window = case.window
    if window is not None and not (isinstance(window, tuple) and len(window) == 2
                                   and all(isinstance(x, int) and not isinstance(x, bool) and x >= -1
                                           for x in window)):
        return f"window must be (left, right) with ints >= -1 (-1: unbounded), got {window!r}"
    if window == (-1, -1):
        return "window (-1, -1) is no window: leave window None"
    if not isinstance(case.softcap, float) or not (case.softcap >= 0.0 and case.softcap < float("inf")):
        return f"softcap must be a finite float >= 0 (0: none), got {case.softcap!r}"
    if case.alibi not in (None, "h", "bh"):
        return f"alibi must be 'h' (slopes (H,)), 'bh' (slopes (B, H)) or None, got {case.alibi!r}"
    if case.op not in FLASH_OPS and (window is not None or case.softcap or case.alibi is not None):
        return f"window, softcap and alibi are {' and '.join(FLASH_OPS)}'s variants, not {case.op}'s"
    if (case.op in (VARLEN_OP, KV_CACHE_OP)) != (case.lens is not None):
        return f"lens (the length pattern) is required by {VARLEN_OP} and {KV_CACHE_OP} and only by them"
    if case.lens is not None and case.lens not in LENGTH_PATTERNS:
        return f"lens must be one of {', '.join(LENGTH_PATTERNS)}, got {case.lens!r}"
    if case.lens == "nonempty" and case.op != KV_CACHE_OP:
        return f"lens=nonempty is a pattern of {KV_CACHE_OP}'s cache lengths"
    if case.lens == "paired" and case.seq_q != case.seq_k:
        return "lens=paired (len_q = len_k per sequence) needs Sq == Sk"
    if case.op == VARLEN_OP and (case.total or case.layout != "bhsd" or case.bad_input is not None):
        return (f"{VARLEN_OP} has no total attention, takes packed (total, H, D) inputs (no layout) "
                "and plants no NaN/Inf input (it could land in padding)")
    return _kv_cache_problem(case)


def _kv_cache_problem(case) -> str | None:
    """What is wrong with a case's KV-cache fields (page, splits, table, append)."""
    kv_fields = (case.page is not None or case.splits or case.table is not None or case.append
                 or case.cache_dtype is not None)
    if case.op != KV_CACHE_OP:
        return f"page, splits, table, append and cache_dtype are {KV_CACHE_OP}'s, not {case.op}'s" if kv_fields else None
    if case.cache_dtype not in (None, *FP8_DTYPES):
        return f"cache_dtype must be one of {', '.join(FP8_DTYPES)} or None, got {case.cache_dtype!r}"
    if case.direction != "fwd" or case.dtype in FP8_DTYPES:
        return f"{KV_CACHE_OP} is forward only, with fp16, bf16 or fp32 queries and caches"
    if case.lens not in KV_CACHE_LENGTHS:
        return f"{KV_CACHE_OP} needs lens (its cache lengths) of {', '.join(KV_CACHE_LENGTHS)}, got {case.lens!r}"
    if case.total or case.dropout or case.layout != "bhsd" or case.bad_input is not None:
        return f"{KV_CACHE_OP} has no total attention, dropout, layout or NaN/Inf inputs"
    if case.page is not None and (not isinstance(case.page, int) or case.page < 1):
        return f"page (the page size) must be a positive int, got {case.page!r}"
    if not isinstance(case.splits, int) or isinstance(case.splits, bool) or not 0 <= case.splits <= 64:
        return f"splits must be an int in [0, 64] (0: the kernel's heuristic), got {case.splits!r}"
    if case.table not in (None, *BLOCK_TABLES):
        return f"table must be one of {', '.join(BLOCK_TABLES)} or None, got {case.table!r}"
    if case.table is not None and case.page is None:
        return "table (the block table's order) needs a paged cache (page)"
    if case.append and case.seq_k < case.seq_q:
        return "append writes Sq new tokens into a cache of at most Sk: it needs Sk >= Sq"
    return None


def _config_problem(case) -> str | None:
    if not re.fullmatch(CONFIG_VALUE_PATTERN, str(case.config)):
        return f"config must be kernel:configuration such as bwd_dq:m128n64s3w8, got {case.config!r}"
    kernel = case.config.partition(":")[0]
    launched = KERNELS_LAUNCHED[(case.op, case.direction)]
    if kernel not in launched or (kernel == "total" and not case.total):
        return (f"config names kernel {kernel!r}, which {case.op}.{case.direction} does not launch "
                f"(it launches {', '.join(launched)}; total only with total)")
    return None
