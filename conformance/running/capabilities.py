"""What an implementation under test says it supports: its declared capabilities.

A kernel judged with `--kernel` may support less than the catalog varies (FlagAttention's
flash kernel takes head dims 16/32/64/128 only; its piecewise kernel has no GQA). Cases
outside its declaration are `unsupported` with the declared reason and nothing is
launched, so a qualification run reports findings, not noise. An implementation that
declares nothing is assumed to support everything.

A declaration is a mapping of the keys below, given either as the attribute
`capabilities` of the operator function (a dict, or a `Capabilities`), or in a TOML file
passed with `--capabilities FILE`, one table per operator:

    [flash_attention]
    dtypes = ["fp16", "bf16"]
    head_dims = [16, 32, 64, 128]
    reason = "FlagAttention's kernel asserts these"        # why, for every key
    [flash_attention.reasons]
    dropout = "no replayable mask"                          # why, for one key

A file's table wins over the attribute. Unknown keys and malformed values are errors that
name the key (the command line turns them into a usage error, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from conformance.cases.catalog import (BAD_INPUTS, DIRECTIONS, DTYPES, FP8_DTYPES, KV_CACHE_OP, LAYOUTS, OPS,
                                      VARLEN_OP, Case)
from conformance.cases.variants import has_empty_rows, has_unequal_lengths
from conformance.judging.conventions import CHOICES as CONVENTION_CHOICES, Conventions
from conformance.judging.kv_cache_calls import (IMPLIED, IMPLIED_REASON, QUERY_IMPLIED, QUERY_LAYOUTS, QUERY_REASON,
                                                SIGNATURE_QUERIES)
from conformance.judging.operators import OPERATORS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib



@dataclass(frozen=True)
class Capabilities:
    """One implementation's declaration; every field's default admits every case.

    dtypes, head_dims, directions, layouts, bad_inputs: the values it takes (None: any)
    causal, noncausal:  which mask modes it computes
    causal_alignment, lse_empty_rows, fp32_matmul: numerical conventions, judged as declared
                        (conformance.judging.conventions): "bottom_right" or "top_left" (a
                        top-left kernel's causal Sq != Sk cases are unsupported only for an
                        operator whose reference is bottom-right only: piecewise_attention),
                        "-inf" or "+inf", "ieee" or "tf32"
    gqa, mqa:           1 < kv_heads < heads / kv_heads == 1 < heads (mqa defaults to gqa)
    unequal_lengths:    Sq != Sk
    empty_rows:         rows that see no key (causal Sq > Sk, a window that misses every key,
                        a varlen sequence without keys): output 0, no gradient
    dropout, lse, total: the optional features
    window, softcap, alibi: FlashAttention-2's variants (window_size, softcap, alibi_slopes)
    varlen:             variable-length (packed) batches: the flash_attention_varlen operator
    max_seq_q, max_seq_k, max_batch_heads: size limits (None: none)
    kv_cache_attention (conformance.judging.kv_cache_calls converts a case into each form):
    kv_signature:       how it is called: "kvcache" (FlashAttention-2's flash_attn_with_kvcache
                        order, the bundled operator's), "paged_attention" (FlagAttention's and
                        vLLM's: query, key_cache, value_cache, context_lens, block_tables, scale,
                        max_context_len, num_splits) or "split_kv" (FlagAttention's
                        flash_attention_split_kv: dense q, k, v, causal, sm_scale)
    cache_layout:       a paged cache's page layout: "page_major" (num_pages, page_size, Hkv, D)
                        or "head_major" (num_pages, Hkv, page_size, D)
    query_layout:       "bshd" (B, Sq, H, D), "bhsd" (B, H, Sq, D) or "sequences" (B, H, D): one
                        token per sequence (the conventions' own: paged_attention's sequences,
                        split_kv's bhsd)
    contiguous, paged:  the cache forms it takes: (B, Smax, Hkv, D), or pages and a block table
    page_sizes:         the page sizes it takes (None: any)
    max_splits:         the largest forced num_splits it takes (0: no num_splits argument)
    append:             k_new/v_new written into the cache by the call
    cache_lengths:      a cache length per sequence (false: every sequence attends to all Sk keys)
    cache_dtypes:       the 8-bit caches it reads with k_descale/v_descale (None: any; [] none)
    """

    dtypes: tuple | None = None
    head_dims: tuple | None = None
    directions: tuple | None = None
    layouts: tuple | None = None
    bad_inputs: tuple | None = None
    causal: bool = True
    noncausal: bool = True
    causal_alignment: str = "bottom_right"
    lse_empty_rows: str = "-inf"
    fp32_matmul: str = "ieee"
    gqa: bool = True
    mqa: bool | None = None
    unequal_lengths: bool = True
    empty_rows: bool = True
    dropout: bool = True
    lse: bool = True
    total: bool = True
    window: bool = True
    softcap: bool = True
    alibi: bool = True
    varlen: bool = True
    max_seq_q: int | None = None
    max_seq_k: int | None = None
    max_batch_heads: int | None = None
    kv_signature: str = "kvcache"
    cache_layout: str = "page_major"
    query_layout: str = "bshd"
    contiguous: bool = True
    paged: bool = True
    page_sizes: tuple | None = None
    max_splits: int | None = None
    append: bool = True
    cache_lengths: bool = True
    cache_dtypes: tuple | None = None
    reason: str = ""
    reasons: dict = field(default_factory=dict)

    def unsupported_reason(self, case: Case) -> str | None:
        """Why this declaration excludes `case` (the first key that does), or None."""
        for key, problem in _problems(self, case):
            if problem:
                why = self.reasons.get(key) or self.reason
                return f"declared capabilities: {problem}" + (f" ({why})" if why else "")
        return None

    def conventions(self) -> Conventions:
        """The numerical conventions this declaration states (conformance.judging.conventions)."""
        return Conventions(**{name: getattr(self, name) for name in CONVENTION_CHOICES})

    def declared(self) -> dict:
        """The keys given (not defaulted), JSON-ready, for env.json and the report."""
        declared = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value != item.default and not (item.name == "reasons" and not value):
                declared[item.name] = list(value) if isinstance(value, tuple) else value
        return declared


def _problems(caps: Capabilities, case: Case):
    """(key, problem or None) for every key, in the order the report names them."""
    mqa = caps.gqa if caps.mqa is None else caps.mqa
    batch_heads = case.batch * case.heads
    yield "dtypes", _not_in("dtype", case.dtype, caps.dtypes)
    yield "head_dims", _not_in("head dim", case.head_dim, caps.head_dims)
    yield "directions", _not_in("direction", case.direction, caps.directions)
    yield "layouts", _not_in("layout", case.layout, caps.layouts)
    yield "bad_inputs", case.bad_input and _not_in("NaN/Inf input", case.bad_input, caps.bad_inputs)
    yield "causal", case.causal and not caps.causal and "no causal mask"
    yield "noncausal", not case.causal and not caps.noncausal and "causal only"
    yield "causal_alignment", (case.causal and has_unequal_lengths(case)
                               and caps.causal_alignment not in OPERATORS[case.op].causal_alignments
                               and f"causal mask aligned {caps.causal_alignment}: {case.op} is judged "
                                   f"bottom-right only (they differ when Sq != Sk)")
    yield "gqa", 1 < case.kv_heads < case.heads and not caps.gqa and "no grouped-query attention (kv_heads < heads)"
    yield "mqa", case.kv_heads == 1 < case.heads and not mqa and "no multi-query attention (kv_heads == 1)"
    yield "unequal_lengths", has_unequal_lengths(case) and not caps.unequal_lengths and "Sq != Sk not supported"
    yield "empty_rows", (not caps.empty_rows and has_empty_rows(case, top_left=caps.causal_alignment == "top_left")
                         and _empty_rows_problem(case))
    yield "dropout", case.dropout and not caps.dropout and "no dropout"
    yield "lse", case.lse and not caps.lse and "no log-normalizer output"
    yield "total", case.total and not caps.total and "no total-attention output"
    yield "window", case.window is not None and not caps.window and "no sliding window (window_size)"
    yield "softcap", case.softcap and not caps.softcap and "no softcap"
    yield "alibi", case.alibi is not None and not caps.alibi and "no ALiBi (alibi_slopes)"
    yield "varlen", case.op == VARLEN_OP and not caps.varlen and "no variable-length (packed) batches"
    yield "max_seq_q", _over("Sq", case.seq_q, caps.max_seq_q)
    yield "max_seq_k", _over("Sk", case.seq_k, caps.max_seq_k)
    yield "max_batch_heads", _over("batch*heads", batch_heads, caps.max_batch_heads)
    if case.op == KV_CACHE_OP:
        yield from _kv_cache_problems(caps, case)


def _kv_cache_problems(caps: Capabilities, case: Case):
    """(key, problem or None) for the KV-cache keys."""
    yield "contiguous", case.page is None and not caps.contiguous and "no contiguous cache (paged only)"
    yield "paged", case.page is not None and not caps.paged and "no paged cache (block_table)"
    yield "page_sizes", case.page is not None and _not_in("page size", case.page, caps.page_sizes)
    yield "max_splits", case.splits and _over("num_splits", case.splits, caps.max_splits)
    yield "append", case.append and not caps.append and "no k_new/v_new (appending to the cache)"
    yield "cache_lengths", (case.lens != "equal" and not caps.cache_lengths
                            and "no cache length per sequence (every sequence attends to all Sk keys)")
    yield "cache_dtypes", case.cache_dtype and _not_in("8-bit cache", case.cache_dtype, caps.cache_dtypes)


def _empty_rows_problem(case: Case) -> str:
    if case.causal and case.seq_q > case.seq_k and case.window is None and case.lens is None:
        return "causal rows that see no key (Sq > Sk) not supported"
    return "rows that see no key (window, causal mask or sequence lengths) not supported"


def _not_in(what: str, value, allowed) -> str | None:
    if allowed is None or value in allowed:
        return None
    return f"{what} {value} not in [{', '.join(str(item) for item in allowed)}]"


def _over(what: str, value: int, limit: int | None) -> str | None:
    return None if limit is None or value <= limit else f"{what} {value} > {limit}"


# --------------------------------------------------------------------------- parsing

_CHOICES = {"dtypes": DTYPES, "directions": DIRECTIONS, "layouts": LAYOUTS, "bad_inputs": BAD_INPUTS,
            "cache_dtypes": FP8_DTYPES}
# Keys of one value from a fixed set.
KV_SIGNATURES = ("kvcache", "paged_attention", "split_kv")
CACHE_LAYOUTS = ("page_major", "head_major")
_ONE_OF = {"kv_signature": KV_SIGNATURES, "cache_layout": CACHE_LAYOUTS, "query_layout": QUERY_LAYOUTS}
_BOOLS = ("causal", "noncausal", "gqa", "mqa", "unequal_lengths", "empty_rows", "dropout", "lse", "total",
          "window", "softcap", "alibi", "varlen", "contiguous", "paged", "append", "cache_lengths")
_LIMITS = ("max_seq_q", "max_seq_k", "max_batch_heads")
KEYS = tuple(item.name for item in fields(Capabilities))


def from_mapping(mapping, where: str) -> Capabilities:
    """A declaration from a dict (attribute or TOML table); ValueError naming `where` and the key."""
    if isinstance(mapping, Capabilities):
        return mapping
    if not isinstance(mapping, dict):
        raise ValueError(f"{where}: expected a table of capabilities, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown capability {unknown[0]!r} (known: {', '.join(KEYS)})")
    values = {key: _value(key, value, where) for key, value in mapping.items()}
    _add_implied(values, where)
    unknown_reasons = sorted(set(values.get("reasons", {})) - set(KEYS))
    if unknown_reasons:
        raise ValueError(f"{where}: reasons.{unknown_reasons[0]}: not a capability (known: {', '.join(KEYS)})")
    return Capabilities(**values)


def _add_implied(values: dict, where: str) -> None:
    """What a declared KV-cache calling convention or query layout cannot take
    (kv_cache_calls.IMPLIED, QUERY_IMPLIED), under the keys the declaration gives itself, each
    with its reason. A convention's query layout is its own: another declared is an error."""
    signature = values.get("kv_signature", "kvcache")
    if signature in SIGNATURE_QUERIES:
        own = SIGNATURE_QUERIES[signature]
        if values.setdefault("query_layout", own) != own:
            raise ValueError(f"{where}: query_layout: {signature} takes {own} queries, got {values['query_layout']!r}")
    reasons = {}
    for implied_by, reason in ((IMPLIED[signature], IMPLIED_REASON.get(signature)),
                               (QUERY_IMPLIED[values.get("query_layout", "bshd")], QUERY_REASON)):
        implied = {key: value for key, value in implied_by.items() if key not in values}
        values.update(implied)
        reasons.update({key: reason for key in implied})
    reasons.update(values.get("reasons", {}))  # the declaration's own reasons win
    if reasons:
        values["reasons"] = reasons


def _value(key: str, value, where: str):
    label = f"{where}: {key}"
    if key == "cache_dtypes" and isinstance(value, (list, tuple)) and not value:
        return ()  # reads no 8-bit cache
    if key in _CHOICES:
        return _choice_list(label, value, _CHOICES[key])
    if key in _ONE_OF:
        if value not in _ONE_OF[key]:
            raise ValueError(f"{label}: expected one of {', '.join(_ONE_OF[key])}, got {value!r}")
        return value
    if key == "max_splits":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{label}: expected an int >= 0 (0: no num_splits argument), got {value!r}")
        return value
    if key in ("head_dims", "page_sizes"):
        if not _is_list_of(value, int) or any(item < 1 for item in value):
            raise ValueError(f"{label}: expected a list of positive ints, got {value!r}")
        return tuple(value)
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise ValueError(f"{label}: expected true or false, got {value!r}")
        return value
    if key in _LIMITS:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{label}: expected a positive int, got {value!r}")
        return value
    if key in CONVENTION_CHOICES:
        if value not in CONVENTION_CHOICES[key]:
            raise ValueError(f"{label}: expected one of {', '.join(CONVENTION_CHOICES[key])}, got {value!r}")
        return value
    if key == "reason":
        if not isinstance(value, str):
            raise ValueError(f"{label}: expected a string, got {value!r}")
        return value
    if not isinstance(value, dict) or not all(isinstance(text, str) for text in value.values()):
        raise ValueError(f"{label}: expected a table of capability = \"why\" strings, got {value!r}")
    return dict(value)


def _is_list_of(value, kind) -> bool:
    return (isinstance(value, (list, tuple)) and bool(value)
            and all(isinstance(item, kind) and not isinstance(item, bool) for item in value))


def _choice_list(label: str, value, choices) -> tuple:
    if not _is_list_of(value, str):
        raise ValueError(f"{label}: expected a non-empty list of strings, got {value!r}")
    unknown = [item for item in value if item not in choices]
    if unknown:
        raise ValueError(f"{label}: unknown value {unknown[0]!r} (known: {', '.join(choices)})")
    return tuple(value)


def load_file(path: str) -> dict[str, Capabilities]:
    """op -> declaration from a `--capabilities` TOML file; ValueError names the file and key."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(document) - set(OPS))
    if unknown:
        raise ValueError(f"{path}: unknown operator table [{unknown[0]}] (known: {', '.join(OPS)})")
    return {op: from_mapping(table, f"{path}: [{op}]") for op, table in document.items()}


def of_function(function, where: str) -> Capabilities | None:
    """The declaration an operator function carries as its `capabilities` attribute, or None.
    A callable attribute is asked for it (so a declaration may depend on the device)."""
    declared = getattr(function, "capabilities", None)
    if declared is None:
        return None
    if callable(declared) and not isinstance(declared, Capabilities):
        declared = declared()
    return from_mapping(declared, f"{where}.capabilities")


class NotSupported(Exception):
    """Raised by a built-in peer adapter (conformance.peers) before it launches anything,
    when the peer refuses the case; the runner records `unsupported` with this reason.
    Other implementations declare what they support instead (a raise is an `error`)."""
