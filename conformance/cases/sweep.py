"""The sweep tiers: every launch configuration of the bundled kernels' tuning space on
the active target (kernels.tuning_space), each judged on a few representative cases.

Miscompiles are usually specific to one configuration (one tile shape, stage count,
warp count), and an autotuner picks different ones on different cards, releases and
lengths; a standard run sees only the one its launch table picks.  Each case here
carries its configuration (`cfg=kernel:m128n64s3w8`), so `diff` and `matrix` follow one
configuration across runs and Triton versions.

    sweep        (GPU) every configuration of every kernel; per configuration two half-
                 precision cases (one fp16 at D=128, causal, GQA with Sq < Sk; one bf16 at
                 D=64 with Sq > Sk, rotating causal and dropout over the configurations),
                 one fp32 case per fp32 configuration and one fp8 forward per forward one;
                 each configuration of the forward, dK/dV and dQ kernels also runs one case of
                 FlashAttention-2's variants, rotating over a sliding window, softcap with
                 ALiBi, and a packed (varlen) batch of mixed lengths
    sweep-quick  (the interpreter, the nightly matrix) one small case per configuration, and
                 for those three kernels one small variant case, rotating likewise

Which configurations a case runs is the target's, so the tier is built for a profile.
"""

from __future__ import annotations

from dataclasses import replace

from conformance.cases.catalog import Case
from conformance.bundled.kernels.tuning_space import KERNELS, config_text, space

SCOPES = {"sweep": "full", "sweep-quick": "quick"}
# The call that launches each kernel: (op, direction, extra case fields).
_CALLS = {
    "fwd": ("flash_attention", "fwd", {}),
    "total": ("flash_attention", "fwd", {"total": True}),
    "bwd_preprocess": ("flash_attention", "bwd", {}),
    "bwd_dkdv": ("flash_attention", "bwd", {}),
    "bwd_dq": ("flash_attention", "bwd", {}),
    "piecewise_fwd": ("piecewise_attention", "fwd", {"dist": 64}),
    "piecewise_bwd_dkdv": ("piecewise_attention", "bwd", {"dist": 64}),
    "piecewise_bwd_dq": ("piecewise_attention", "bwd", {"dist": 64}),
    # mixed cache lengths in shuffled pages of 16, three splits: partial pages, empty splits
    "decode_split": ("kv_cache_attention", "fwd", {"lens": "mixed", "page": 16, "table": "shuffled", "splits": 3}),
    "decode_merge": ("kv_cache_attention", "fwd", {"lens": "mixed", "page": 16, "table": "shuffled", "splits": 3}),
}
WITH_DROPOUT = ("fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq")
# (batch, heads, kv_heads, seq_q, seq_k): GQA with ragged Sq < Sk; Sq > Sk, whose first
# causal rows see no key; a small one for the interpreter.
GQA_SHAPE = (1, 4, 2, 509, 1024)
TALL_SHAPE = (2, 2, 2, 333, 200)
QUICK_SHAPE = (1, 2, 1, 77, 100)
# The kernels the variants change (kernels.scores, kernels.bands, kernels.sequences), and the
# variant cases their configurations rotate over: (op, extra case fields, causal); a packed
# batch takes its shape's batch as its number of sequences, of mixed lengths up to Sq / Sk.
VARIANT_KERNELS = ("fwd", "bwd_dkdv", "bwd_dq")
VARIANT_CASES = (
    ("flash_attention", {"window": (64, 0)}, True),
    ("flash_attention", {"softcap": 30.0, "alibi": "h"}, False),
    ("flash_attention_varlen", {"lens": "mixed"}, True),
)
VARLEN_SHAPE = (8, 4, 2, 160, 192)
QUICK_VARLEN_SHAPE = (4, 2, 1, 48, 64)


def _case(kernel: str, config, dtype: str, head_dim: int, causal: bool, shape, dropout: bool = False) -> Case:
    op, direction, extra = _CALLS[kernel]
    batch, heads, kv_heads, seq_q, seq_k = shape
    return Case(op, direction, dtype, head_dim, causal, batch, heads, kv_heads, seq_q, seq_k,
                dropout=0.1 if dropout and kernel in WITH_DROPOUT else 0.0,
                config=f"{kernel}:{config_text(config)}", **extra)


def _variant_case(kernel: str, config, index: int, dtype: str, head_dim: int, quick: bool) -> Case:
    """The variant case of a kernel's index-th configuration (VARIANT_CASES, in rotation)."""
    op, fields, causal = VARIANT_CASES[index % len(VARIANT_CASES)]
    if op == "flash_attention_varlen":
        shape = QUICK_VARLEN_SHAPE if quick else VARLEN_SHAPE
    else:
        shape = QUICK_SHAPE if quick else GQA_SHAPE
    return replace(_case(kernel, config, dtype, head_dim, causal, shape), op=op, **fields)


def _full_cases(kernel: str, target, dtypes: tuple[str, ...]) -> list[Case]:
    out = []
    for index, config in enumerate(space(kernel, target, "fp16")):
        rotate_causal, rotate_dropout = index % 2 == 0, (index // 2) % 2 == 1
        out += [_case(kernel, config, "fp16", 128, True, GQA_SHAPE),
                _case(kernel, config, "bf16", 64, rotate_causal, TALL_SHAPE, rotate_dropout)]
        if kernel == "fwd" and "fp8e4m3" in dtypes:
            out.append(_case(kernel, config, "fp8e4m3", 128, rotate_causal, GQA_SHAPE))
        if kernel in VARIANT_KERNELS:
            out.append(_variant_case(kernel, config, index, ("bf16", "fp16")[index % 2], 64, quick=False))
    if kernel != "bwd_preprocess":
        out += [_case(kernel, config, "fp32", 64, index % 2 == 0, GQA_SHAPE)
                for index, config in enumerate(space(kernel, target, "fp32"))]
    return out


def _quick_cases(kernel: str, target) -> list[Case]:
    configs = list(enumerate(space(kernel, target, "fp16")))
    plain = [_case(kernel, config, ("fp16", "bf16")[index % 2], (32, 64)[index // 2 % 2], index % 2 == 0,
                   QUICK_SHAPE, dropout=index % 3 == 0)
             for index, config in configs]
    variants = [_variant_case(kernel, config, index, ("bf16", "fp16")[index % 2], 32, quick=True)
                for index, config in configs] if kernel in VARIANT_KERNELS else []
    return plain + variants


def sweep_cases(tier: str, target, dtypes: tuple[str, ...] = ()) -> list[Case]:
    """The cases of `tier` (sweep or sweep-quick) for `target`, kernel by kernel;
    `dtypes`: the profile's (fp8 cases only where it has fp8)."""
    if tier not in SCOPES:
        raise ValueError(f"unknown sweep tier {tier!r} (known: {', '.join(SCOPES)})")
    if SCOPES[tier] == "quick":
        return [case for kernel in KERNELS for case in _quick_cases(kernel, target)]
    return [case for kernel in KERNELS for case in _full_cases(kernel, target, dtypes)]


def configuration_counts(cases: list[Case]) -> dict[str, int]:
    """kernel:configuration -> how many of `cases` run it (the sweep's cost, before it starts)."""
    counts: dict[str, int] = {}
    for case in cases:
        if case.config:
            counts[case.config] = counts.get(case.config, 0) + 1
    return counts
