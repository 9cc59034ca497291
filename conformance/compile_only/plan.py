"""What the compile-only tier compiles for one target: the operator calls whose
launches cover every launch configuration the target's profile would use.

The kernels are not compiled from a second, hand-written description of their
arguments: the worker calls the real operators (flash_attention forward, backward
and total attention; piecewise_attention forward and backward; kv_cache_attention's
append, split and merge; flash_attention and flash_attention_varlen with FlashAttention-2's
variants) and compiles what they launch.  This module only chooses the calls: per dtype, per
head dim, per causal/dropout variant, per attention variant.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from conformance.backends.profile import FP8, BackendProfile
from conformance.bundled.kernels.tuning_space import config_text, space
from conformance.bundled.kernels.validation import DTYPE_NAMES

FLASH, PIECEWISE, KV_CACHE = "flash_attention", "piecewise_attention", "kv_cache_attention"
VARLEN = "flash_attention_varlen"
# FlashAttention-2's variants (kernels.scores, kernels.bands, kernels.sequences): each turns on
# constexpr code of its own in the forward and both backward kernels. full: each alone, and all
# three at once; quick: all three at once (the most code), on the dense and the packed batch.
ATTENTION_VARIANTS = ("window", "softcap", "alibi")
ALL_VARIANTS = "window+softcap+alibi"
# full: every dtype x power-of-two head dim x variant of the profile.
# quick (CI): each launch-table row's largest head dim, one dtype per table family
# (fp16 for the general tables -- bf16 launches the same tiles -- fp32 for the fp32
# ones, fp8 where listed) and only the variant with the most code (causal + dropout).
# sweep: every launch configuration of every kernel's tuning space on the target
# (kernels.tuning_space; the sweep tiers run the same), one call each: fp16 at D = 128
# and fp32 at D = 64, causal, with dropout where the kernel has it.
SCOPES = ("full", "quick", "sweep")
# The call that launches each kernel of the tuning space, and its configurations per chunk.
_SWEEP_CALLS = {"fwd": (FLASH, False), "total": (FLASH, False), "bwd_preprocess": (FLASH, True),
                "bwd_dkdv": (FLASH, True), "bwd_dq": (FLASH, True), "piecewise_fwd": (PIECEWISE, False),
                "piecewise_bwd_dkdv": (PIECEWISE, True), "piecewise_bwd_dq": (PIECEWISE, True),
                "decode_split": (KV_CACHE, False), "decode_merge": (KV_CACHE, False)}
_SWEEP_CHUNK = 12
# Bits of each input dtype's operands.
_OPERAND_BITS = {name: dtype.itemsize * 8 for dtype, name in DTYPE_NAMES.items()}


@dataclass(frozen=True)
class Call:
    """One operator call of the plan (compiled, never run)."""

    op: str
    dtype: str
    head_dim: int
    causal: bool
    dropout: bool = False
    backward: bool = True
    config: str | None = None  # kernel:configuration the call's kernel is launched with (sweep)
    variant: str | None = None  # attention variants joined by "+" (ATTENTION_VARIANTS), None: plain

    def as_dict(self) -> dict:
        return asdict(self)


def _power_of_two_head_dims(profile: BackendProfile) -> list[int]:
    """Head dims of the profile that are powers of two: the kernels pad the others
    (96, 192) to the next power of two, so those compile to the same kernels."""
    return [dim for dim in profile.head_dims if dim & (dim - 1) == 0]


def _row_bounds(profile: BackendProfile) -> set[int]:
    return {bound for launch_table in profile.launch.values() for bound, _ in launch_table.rows}


def head_dims(profile: BackendProfile, scope: str) -> list[int]:
    dims = _power_of_two_head_dims(profile)
    return [dim for dim in dims if dim in _row_bounds(profile)] if scope == "quick" else dims


def dtypes(profile: BackendProfile, scope: str) -> list[str]:
    """full: every dtype of the profile; quick: the first of each operand width (16-, 32- and
    8-bit operands take different MMA instructions and tile sizes; bf16 is fp16's twin there)."""
    if scope == "full":
        return list(profile.dtypes)
    first_of_width = {}
    for dtype in profile.dtypes:
        first_of_width.setdefault(_OPERAND_BITS[dtype], dtype)
    return list(first_of_width.values())


def _variants(scope: str, with_dropout: bool) -> list[tuple[bool, bool]]:
    if scope == "quick":
        return [(True, with_dropout)]
    return [(causal, dropout) for causal in (False, True) for dropout in (False, True)[:1 + with_dropout]]


def calls(profile: BackendProfile, dtype: str, head_dim: int, scope: str) -> list[Call]:
    """The calls of one (dtype, head dim): fp8 is flash_attention's forward and kv_cache_attention's
    cache (read by fp16 queries) only."""
    kv_cache = [Call(KV_CACHE, dtype, head_dim, causal, backward=False) for causal, _ in _variants(scope, False)]
    if dtype in FP8:
        return [Call(FLASH, dtype, head_dim, causal, dropout, backward=False)
                for causal, dropout in _variants(scope, with_dropout=True)] + kv_cache
    flash = [Call(FLASH, dtype, head_dim, causal, dropout) for causal, dropout in _variants(scope, True)]
    piecewise = [Call(PIECEWISE, dtype, head_dim, causal) for causal, _ in _variants(scope, False)]
    return flash + piecewise + kv_cache + (variant_calls(dtype, head_dim, scope) if scope == "full" else [])


def variant_calls(dtype: str, head_dim: int, scope: str) -> list[Call]:
    """flash_attention with each attention variant (full) or all at once, and the packed batch
    of flash_attention_varlen plain and with all of them; causal, forward and backward. The
    quick scope compiles them once per target (`chunks`): at its largest head dim, where the
    variants' extra code weighs most on registers, in its first 16-bit dtype."""
    dense = [*ATTENTION_VARIANTS, ALL_VARIANTS] if scope == "full" else [ALL_VARIANTS]
    return ([Call(FLASH, dtype, head_dim, True, variant=variant) for variant in dense]
            + [Call(VARLEN, dtype, head_dim, True, variant=variant) for variant in (None, ALL_VARIANTS)])


def sweep_calls(profile: BackendProfile) -> list[Call]:
    """One call per configuration of every kernel's tuning space on the profile's target."""
    out = []
    for kernel, (op, backward) in _SWEEP_CALLS.items():
        for dtype, head_dim in (("fp16", 128), ("fp32", 64)):
            if dtype not in profile.dtypes or (dtype == "fp32" and kernel == "bwd_preprocess"):
                continue
            out += [Call(op, dtype, head_dim, True, op == FLASH, backward, f"{kernel}:{config_text(config)}")
                    for config in space(kernel, profile.target, dtype)]
    return out


def chunks(profile: BackendProfile, scope: str) -> list[list[Call]]:
    """The plan of one target in independent chunks (a worker process each): per
    (dtype, head dim) for `full`, per dtype for the few calls of `quick` (a process
    start costs about as much as a compile). Calls that share a kernel configuration
    (the delta pre-pass, total attention) are always in the same chunk."""
    if scope not in SCOPES:
        raise ValueError(f"--scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    if scope == "sweep":
        calls_ = sweep_calls(profile)
        return [calls_[start:start + _SWEEP_CHUNK] for start in range(0, len(calls_), _SWEEP_CHUNK)]
    dims = head_dims(profile, scope)
    if scope == "quick":
        plan = [[call for dim in dims for call in calls(profile, dtype, dim, scope)] for dtype in dtypes(profile, scope)]
        sixteen_bit = [dtype for dtype in dtypes(profile, scope) if _OPERAND_BITS[dtype] == 16]
        return plan + ([variant_calls(sixteen_bit[0], max(dims), scope)] if sixteen_bit and dims else [])
    return [calls(profile, dtype, dim, scope) for dtype in dtypes(profile, scope) for dim in dims]
