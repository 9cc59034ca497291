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

from conformance.cases import validity
from conformance.cases.variants import LENGTH_PATTERNS
from conformance.cases.vocabulary import (  # noqa: F401 -- the catalog's words, re-exported
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
    Feature("values", None, rf"({VALUES_PATTERN})", str),
    Feature("config", None, rf"cfg=({CONFIG_VALUE_PATTERN})", str),
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
        problem = validity.problem(self)
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
