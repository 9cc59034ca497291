"""The case catalog: what a conformance run checks, as data.

A `Case` is one operator call in one direction at one dtype, head dim, mask and
shape, with one input seed. Its `id` is stable across runs, machines and versions
(reports, diffs and reproducers key on it) and parses back with `Case.from_id`:

    flash_attention.bwd[bf16,d128,causal,B2,H8,Hkv2,Sq509,Sk1024,seed0]
    flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,lse,seed0]
    flash_attention_varlen.bwd[bf16,d64,causal,B1000,H4,Hkv1,Sq128,Sk128,win128_0,lens=mixed,seed0]
    kv_cache_attention.fwd[fp16,d128,causal,B8,H32,Hkv8,Sq4,Sk4096,lens=mixed,page16,splits4,append,seed0]

Tiers are data too: a tier (conformance/cases/tiers.py) is a list of grids (axis ->
values) expanded here by Cartesian product, deduplicated, in first-seen order.
Adding coverage means adding a grid line, not code.

This module must not import torch: `python -m conformance list` stays instant.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from conformance.bundled.kernels.targets import FP8, HIGH_PRECISION
from conformance.bundled.kernels.tuning_space import CONFIG_PATTERN
from conformance.cases.variants import LENGTH_PATTERNS

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


@dataclass(frozen=True)
class Feature:
    """An optional id token after Sk: shown only when the field differs from `default`."""

    field: str
    default: object
    pattern: str  # regex of the whole token; group 1 is the value (absent for flags)
    convert: object = None  # str -> value; None for a boolean flag
    render: object = None  # value -> the whole token, where prefix + value is not it

    def token(self, value) -> str | None:
        if value == self.default:
            return None
        if self.convert is None:
            return self.field
        if self.render is not None:
            return self.render(value)
        return self.pattern.split("(")[0] + (f"{value:g}" if isinstance(value, float) else str(value))

    def parse(self, token: str):
        match = re.fullmatch(self.pattern, token)
        if match is None:
            return None
        return True if self.convert is None else self.convert(match[1])


# In id order. Append new features at the end so existing ids never change.
FEATURES = (
    Feature("lse", False, r"lse"),
    Feature("total", False, r"total"),
    Feature("dropout", 0.0, r"dropout(0\.\d+)", float),
    Feature("layout", "bhsd", r"(bshd|packed)", str),
    Feature("dist", None, r"dist(\d+)", int),
    Feature("bad_input", None, r"(nan|inf)", str),
    Feature("values", None, r"([a-z]+:[0-9][0-9.e+]*)", str),
    Feature("config", None, rf"cfg=([a-z_]+:{CONFIG_PATTERN})", str),
    # FlashAttention-2's variants: window (left, right) as win<left>_<right> (-1 = unbounded),
    # softcap<c>, ALiBi slopes of shape (H,) or (B, H), and a varlen case's length pattern.
    Feature("window", None, r"win(-?\d+_-?\d+)", lambda text: tuple(int(x) for x in text.split("_")),
            lambda window: f"win{window[0]}_{window[1]}"),
    Feature("softcap", 0.0, r"softcap(\d+(?:\.\d+)?)", float),
    Feature("alibi", None, r"(alibi|alibi_bh)", {"alibi": "h", "alibi_bh": "bh"}.get,
            {"h": "alibi", "bh": "alibi_bh"}.get),
    Feature("lens", None, rf"lens=({'|'.join(LENGTH_PATTERNS)})", str),
    # KV-cache decoding: a paged cache's page size (absent: a contiguous cache), the forced
    # number of key splits (absent: the kernel's heuristic), the block table's order (absent:
    # sequential pages), and new keys/values appended to the cache by the call.
    Feature("page", None, r"page(\d+)", int),
    Feature("splits", 0, r"splits(\d+)", int),
    Feature("table", None, rf"table=({'|'.join(BLOCK_TABLES)})", str),
    Feature("append", False, r"append"),
    # an 8-bit KV cache (per-tensor descales), read by queries of the case's dtype
    Feature("cache_dtype", None, r"cache=(fp8e4m3|fp8e5m2)", str),
)
_VALUES, _CONFIG = (next(f for f in FEATURES if f.field == name) for name in ("values", "config"))
# The bundled kernels a case's call launches (the launch-table names, kernels.tuning):
# the kernels whose launch configuration a case's `config` may set.
KERNELS_LAUNCHED = {
    ("flash_attention", "fwd"): ("fwd", "total"),
    ("flash_attention", "bwd"): ("bwd_preprocess", "bwd_dkdv", "bwd_dq"),
    ("piecewise_attention", "fwd"): ("piecewise_fwd",),
    ("piecewise_attention", "bwd"): ("bwd_preprocess", "piecewise_bwd_dkdv", "piecewise_bwd_dq"),
    # Not known yet: the varlen kernels' launch-table names come with them (kernels.tuning),
    # and until they are listed here no `cfg=` token is valid for the varlen operator.
    ("flash_attention_varlen", "fwd"): (),
    ("flash_attention_varlen", "bwd"): (),
    ("kv_cache_attention", "fwd"): ("decode_split", "decode_merge"),
    ("kv_cache_attention", "bwd"): (),
}
# Values `bad_input` can plant in the first query tensor (see conformance.cases.inputs).
BAD_INPUTS = ("nan", "inf")

EXAMPLE_ID = "flash_attention.bwd[bf16,d128,causal,B2,H8,Hkv2,Sq509,Sk1024,seed0]"


@dataclass(frozen=True)
class Case:
    """One catalog entry.

    lse / total: the forward also returns the log-normalizer / total attention.
    dropout: attention dropout probability (the kernel's mask is replayed by the reference).
    layout: memory layout of the inputs (see LAYOUTS).
    dist: piecewise_attention's distance threshold (that op only).
    bad_input: "nan" or "inf" planted in one query element; it must propagate as
        it does through torch (the rule judges the other positions).
    values: the case's own input distribution (a spec such as `negative:1000`, see
        conformance.cases.distributions), for cases that exist to stress one numerical
        edge; it takes the place of a run's --distribution for that case.
    config: `kernel:configuration` (e.g. `bwd_dq:m128n64s3w8`, kernels.tuning_space): the
        launch configuration one bundled kernel of the call runs with instead of its
        launch table's (the sweep tier); shown in the id as `cfg=...`.
    window: FlashAttention-2's sliding window (left, right), -1 for an unbounded side
        (conformance.cases.variants); None for none. `win128_0` in the id.
    softcap: c > 0 caps every scaled score as c * tanh(s / c); 0.0 for none. `softcap30`.
    alibi: "h" for ALiBi slopes of shape (H,), "bh" for per-sequence slopes (B, H)
        (conformance.cases.variants.alibi_slope_values); None for none. `alibi`, `alibi_bh`.
    lens: the length pattern of a flash_attention_varlen case: `batch` sequences of at
        most seq_q queries and seq_k keys, lengths drawn from the case
        (conformance.cases.variants). `lens=mixed`. A kv_cache_attention case's pattern of
        cache lengths (equal, mixed, or nonempty: mixed with no empty cache; every sequence
        has seq_q new queries).
    page: kv_cache_attention's page size (a paged cache with a block table); None for a
        contiguous (B, Sk, Hkv, D) cache. `page16`.
    splits: kv_cache_attention's forced number of key splits (num_splits); 0 for the
        kernel's own heuristic. `splits4`.
    table: the block table's order, "shuffled" or "shared" (a prefix of pages shared by
        sequences); None for sequential pages. `table=shuffled`.
    append: kv_cache_attention is given the seq_q new tokens' keys and values (k_new,
        v_new) to write into the cache at each sequence's cache length before attending.
    cache_dtype: kv_cache_attention's cache in fp8 ("fp8e4m3" or "fp8e5m2") with per-tensor
        k_descale/v_descale, read by queries of `dtype`; None for a cache in `dtype`.
        `cache=fp8e4m3`.
    """

    op: str
    direction: str
    dtype: str
    head_dim: int
    causal: bool
    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    seed: int = 0
    lse: bool = False
    total: bool = False
    dropout: float = 0.0
    layout: str = "bhsd"
    dist: int | None = None
    bad_input: str | None = None
    values: str | None = None
    config: str | None = None
    window: tuple | None = None
    softcap: float = 0.0
    alibi: str | None = None
    lens: str | None = None
    page: int | None = None
    splits: int = 0
    table: str | None = None
    append: bool = False
    cache_dtype: str | None = None

    def __post_init__(self):
        if isinstance(self.window, list):  # a results line's JSON list
            object.__setattr__(self, "window", tuple(self.window))
        problem = _validation_problem(self)
        if problem:
            raise ValueError(f"invalid case: {problem}")

    @property
    def id(self) -> str:
        """The stable, human-readable identity, e.g. `EXAMPLE_ID`."""
        return self._tokens_text()

    @property
    def data_key(self) -> str:
        """The id without its seed: together with the seed it determines the inputs,
        so two shapes never share data while one shape's seeds stay comparable."""
        return self._tokens_text(with_seed=False)

    def _tokens_text(self, with_seed: bool = True) -> str:
        tokens = [
            self.dtype,
            f"d{self.head_dim}",
            "causal" if self.causal else "noncausal",
            f"B{self.batch}",
            f"H{self.heads}",
            f"Hkv{self.kv_heads}",
            f"Sq{self.seq_q}",
            f"Sk{self.seq_k}",
        ]
        tokens += [t for t in (f.token(getattr(self, f.field)) for f in FEATURES) if t is not None]
        if with_seed:
            tokens.append(f"seed{self.seed}")
        return f"{self.op}.{self.direction}[{','.join(tokens)}]"

    @classmethod
    def from_id(cls, text: str) -> "Case":
        """Parse an id produced by `Case.id`; ValueError (one line) if malformed."""
        try:
            case = cls(**_parse_id(text))
        except ValueError as exc:
            raise ValueError(f"malformed case id {text!r}: {exc} (expected e.g. {EXAMPLE_ID})") from None
        if case.id != text:
            raise ValueError(f"malformed case id {text!r}: not in canonical form, which is {case.id!r}")
        return case

    def fields(self) -> dict:
        """The case's fields as a plain dict (for results lines)."""
        return asdict(self)

    def unsupported_reason(self, profile) -> str | None:
        """Why `profile`'s backend cannot run this case, or None if it can (an 8-bit cache's
        dtype included)."""
        reason = profile.unsupported_reason(self.dtype, self.head_dim)
        if reason is None and self.cache_dtype is not None:
            reason = profile.dtype_unsupported_reason(self.cache_dtype)
        return reason


def _validation_problem(case: Case) -> str | None:
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
    if case.values is not None and not re.fullmatch(_VALUES.pattern, str(case.values)):
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


def _variant_problem(case: Case) -> str | None:
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


def _kv_cache_problem(case: Case) -> str | None:
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


def _config_problem(case: Case) -> str | None:
    if not re.fullmatch(_CONFIG.pattern[len("cfg="):], str(case.config)):
        return f"config must be kernel:configuration such as bwd_dq:m128n64s3w8, got {case.config!r}"
    kernel = case.config.partition(":")[0]
    launched = KERNELS_LAUNCHED[(case.op, case.direction)]
    if kernel not in launched or (kernel == "total" and not case.total):
        return (f"config names kernel {kernel!r}, which {case.op}.{case.direction} does not launch "
                f"(it launches {', '.join(launched)}; total only with total)")
    return None


_ID = re.compile(r"(?P<op>\w+)\.(?P<direction>\w+)\[(?P<body>[^\[\]]*)\]")

# The fixed leading tokens of an id body: field name, token pattern, converter.
_FIXED_TOKENS = (
    ("dtype", r"(\w+)", str),
    ("head_dim", r"d(\d+)", int),
    ("causal", r"(causal|noncausal)", lambda word: word == "causal"),
    ("batch", r"B(\d+)", int),
    ("heads", r"H(\d+)", int),
    ("kv_heads", r"Hkv(\d+)", int),
    ("seq_q", r"Sq(\d+)", int),
    ("seq_k", r"Sk(\d+)", int),
)
_SEED = re.compile(r"seed(\d+)")


def _parse_id(text: str) -> dict:
    match = _ID.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError("expected op.direction[tokens]")
    tokens = match["body"].split(",")
    if len(tokens) < len(_FIXED_TOKENS) + 1:
        raise ValueError(f"expected at least {len(_FIXED_TOKENS) + 1} comma-separated tokens, got {len(tokens)}")
    fields = {"op": match["op"], "direction": match["direction"]}
    for (name, pattern, convert), token in zip(_FIXED_TOKENS, tokens):
        token_match = re.fullmatch(pattern, token)
        if not token_match:
            raise ValueError(f"token {token!r} is not a valid {name}")
        fields[name] = convert(token_match[1])
    *feature_tokens, seed_token = tokens[len(_FIXED_TOKENS):]
    for token in feature_tokens:
        parsed = [(f.field, f.parse(token)) for f in FEATURES if f.parse(token) is not None]
        if not parsed:
            known = ", ".join(f.pattern.replace("\\", "") for f in FEATURES)
            raise ValueError(f"unknown feature token {token!r} (known: {known})")
        fields.update(parsed)
    seed_match = _SEED.fullmatch(seed_token)
    if not seed_match:
        raise ValueError(f"last token must be seedN, got {seed_token!r}")
    fields["seed"] = int(seed_match[1])
    return fields


# ---------------------------------------------------------------------------
# Grids (the tiers' own grids are in conformance.cases.tiers)
#
# A grid maps axis -> values. Axes are Case fields, except "shape", whose values
# are (batch, heads, kv_heads, seq_q, seq_k) tuples. Omitted axes take
# GRID_DEFAULTS.

Grid = Mapping[str, Sequence]
GRID_DEFAULTS: Grid = {"op": ("flash_attention",), "seed": (0,), **{f.field: (f.default,) for f in FEATURES}}
# Case fields of a grid's "shape" tuples, in order.
SHAPE_FIELDS = ("batch", "heads", "kv_heads", "seq_q", "seq_k")
_GRID_AXES = frozenset(GRID_DEFAULTS) | {"direction", "dtype", "head_dim", "causal", "shape"}


def expand_grid(grid: Grid) -> list[Case]:
    """All cases of one grid, in product order (last axis varies fastest)."""
    unknown = set(grid) - _GRID_AXES
    if unknown:
        raise ValueError(f"unknown grid axes {sorted(unknown)}; known: {sorted(_GRID_AXES)}")
    axes = {**GRID_DEFAULTS, **grid}
    expanded = []
    for combination in itertools.product(*axes.values()):
        values = dict(zip(axes, combination))
        values.update(zip(SHAPE_FIELDS, values.pop("shape")))
        expanded.append(Case(**values))
    return expanded


def expand_tier(grids: Sequence[Grid]) -> list[Case]:
    """Cases of all grids, duplicates dropped, in first-seen order."""
    unique = {}
    for grid in grids:
        for case in expand_grid(grid):
            unique.setdefault(case.id, case)
    return list(unique.values())
