"""The tuning space of the bundled kernels: every launch configuration a kernel may be
given on a target, the text that names one (`m128n64s3w8`), and a scoped override.

The launch tables (kernels.tuning) pick one configuration per kernel, head dim and
dtype; a tuning script, an autotuner or a conformance sweep picks among all of these.
Miscompiles are usually specific to one configuration, so a harness can judge each of
them: `configured(kernel, config)` makes every launch of that kernel use it.

Text form: m{BLOCK_M}n{BLOCK_N}s{stages}w{warps}, then `-wpe{N}` (AMD's waves_per_eu),
`-tma` (tiles streamed through tensor descriptors) and `-hc{N}` (the head dim sliced N
columns at a time, kernels.head_slices) where set.
"""

from __future__ import annotations

import itertools
import re
from contextlib import contextmanager
from dataclasses import replace

from . import tuning
from .targets import Target

CONFIG_PATTERN = r"m(\d+)n(\d+)s(\d+)w(\d+)(?:-wpe(\d+))?(-tma)?(?:-hc(\d+))?"
# Kernels that stream their loop's tiles through tensor descriptors where allowed.
STREAMING = ("fwd", "bwd_dkdv", "bwd_dq")
KERNELS = (*tuning.KERNELS, "piecewise_fwd", "piecewise_bwd_dkdv", "piecewise_bwd_dq", "decode_split", "decode_merge")
# Kernels that can slice the head dim of their score products (kernels.head_slices).
SLICING = ("fwd", "total", "bwd_dkdv", "bwd_dq", "piecewise_fwd", "piecewise_bwd_dkdv", "piecewise_bwd_dq",
           "decode_split")

# Axes of the space per tile family.  Half precision (fp16/bf16, and fp8 for the forward):
# the tutorial's and the tables' tiles with their neighbours; fp32 (FMA-unit dots, twice
# the bytes per element): the small tiles its tables use.  The delta pre-pass has one tile.
_HALF = dict(block_m=(64, 128), block_n=(32, 64, 128), num_warps=(4, 8), num_stages=(1, 2, 3))
_FP32 = dict(block_m=(16, 32, 64), block_n=(16, 32), num_warps=(4, 8), num_stages=(1, 2))
_PREPROCESS = dict(block_m=(32, 64, 128), block_n=(64,), num_warps=(4,), num_stages=(1,))
# kv_cache_attention's merge: rows per program (no key tile: block_n is not read) and the
# warps of the pre-pass tables it borrows (kernels.tuning.BORROWED), 8 on RDNA; every family.
_MERGE = dict(block_m=(16, 32, 64, 128), block_n=(64,), num_warps=(4, 8), num_stages=(1,))
# kv_cache_attention's split kernel in half precision (the families _HALF serves: NVIDIA, CDNA,
# CoreX): a decode step has few rows per kv head (kernels.decode_plan.row_tile), so row tiles
# down to 16 as well.
_DECODE_ROWS = (16, 32, 64, 128)
# RDNA (32-wide waves, 256 VGPRs per work-item): the tiles its tables choose among
# (kernels.tables_amd: the forward's 128x64 at small head dims down to 16x16 where the
# backward kernels' operands fill the registers), 4 to 16 waves (16 kept the most of
# them in registers at D = 256 before the head dim was sliced), one stage (RDNA has no asynchronous copies to overlap), no
# waves_per_eu; fp32 (FMA dots) in the small tiles its tables take.
# Each with the head dim sliced in 16 or 32 columns (the RDNA tables' choices at D = 128 and
# 256) or not (None), where the kernel can (SLICING).
_RDNA_HALF = dict(block_m=(16, 32, 64, 128), block_n=(16, 32, 64), num_warps=(4, 8, 16), num_stages=(1,))
_RDNA_HEAD_CHUNKS = (None, 16, 32)
_RDNA_FP32 = dict(block_m=(16, 32), block_n=(16, 32), num_warps=(4, 8, 16), num_stages=(1,))
# The interpreter ignores warps and stages: only tile shapes differ there.
_INTERPRETED = dict(block_m=(16, 32, 64), block_n=(16, 32, 64), num_warps=(4,), num_stages=(1,))


def config_text(config: tuning.LaunchConfig) -> str:
    """The name of a configuration, e.g. `m128n64s3w8-tma`."""
    text = f"m{config.block_m}n{config.block_n}s{config.num_stages}w{config.num_warps}"
    if config.waves_per_eu is not None:
        text += f"-wpe{config.waves_per_eu}"
    text += "-tma" if config.descriptors else ""
    return text + (f"-hc{config.head_chunk}" if config.head_chunk is not None else "")


def parse_config(text: str) -> tuning.LaunchConfig:
    """The configuration a `config_text` names; ValueError (one line) if malformed."""
    match = re.fullmatch(CONFIG_PATTERN, text)
    if match is None:
        raise ValueError(f"malformed launch configuration {text!r} (expected e.g. m128n64s3w8, "
                         "optionally with -wpe2, -tma and -hc32)")
    block_m, block_n, stages, warps, waves, tma, head_chunk = match.groups()
    try:
        return tuning.LaunchConfig(int(block_m), int(block_n), num_warps=int(warps), num_stages=int(stages),
                                   waves_per_eu=None if waves is None else int(waves), descriptors=bool(tma),
                                   head_chunk=None if head_chunk is None else int(head_chunk))
    except ValueError as exc:
        raise ValueError(f"launch configuration {text!r}: {exc}") from None


def _axes(kernel: str, target: Target, dtype: str) -> dict:
    """The axes of `kernel`'s space on `target`'s family: the interpreter, RDNA (wave32 AMD),
    CDNA, CoreX or NVIDIA."""
    if kernel == "bwd_preprocess":
        return _PREPROCESS
    if kernel == "decode_merge":
        return _MERGE
    if target.interpreted:
        return _INTERPRETED
    if target.backend == "hip" and target.warp_size == 32:
        axes = _RDNA_FP32 if dtype == "fp32" else _RDNA_HALF
        return {**axes, **({"head_chunk": _RDNA_HEAD_CHUNKS} if kernel in SLICING else {})}
    axes = dict(_FP32 if dtype == "fp32" else _HALF)
    if kernel == "decode_split" and dtype != "fp32":
        axes.update(block_m=_DECODE_ROWS)
    if target.backend == "hip":  # one stage and 4 wavefronts in the tables; waves_per_eu as a knob
        axes.update(num_stages=(1, 2), waves_per_eu=(None, 2))
    if target.corex:  # 64-wide warps: half the warps of a CUDA tile
        axes.update(num_warps=(2, 4))
    return axes


def space(kernel: str, target: Target, dtype: str = "fp16") -> tuple[tuning.LaunchConfig, ...]:
    """Every configuration `kernel` may be launched with on `target` for inputs of `dtype`,
    descriptor streaming included where the target compiles it (a TMA unit: sm_90, sm_100,
    sm_120).  The axes are the target family's (_axes); whether a configuration fits the
    device's shared memory and registers only a compile tells (the compile-only tier's sweep
    scope: `unsupported` where it cannot launch) -- no static estimate holds: two streamed
    tiles per stage, the obvious one, exceeded triton's real figure in 532 of 1,140 sweep
    configurations (reports/compile-sweep/, triton 3.6)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r} (known: {', '.join(KERNELS)})")
    axes = _axes(kernel, target, dtype)
    configs = [tuning.LaunchConfig(**dict(zip(axes, values))) for values in itertools.product(*axes.values())]
    if kernel in STREAMING and target.tensor_descriptors:
        configs += [replace(config, descriptors=True) for config in configs]
    return tuple(configs)


def check_in_space(kernel: str, text: str, target: Target, dtype: str = "fp16") -> tuning.LaunchConfig:
    """The parsed configuration if `kernel`'s space on `target` has it; ValueError listing
    the space otherwise."""
    config = parse_config(text)
    members = space(kernel, target, dtype)
    if config not in members:
        raise ValueError(f"{kernel} has no launch configuration {text} on {target.name} for {dtype}; "
                         f"its {len(members)}: {' '.join(config_text(c) for c in members)}")
    return config


@contextmanager
def configured(kernel: str, config: tuning.LaunchConfig):
    """Every launch of `kernel` (all head dims, dtypes and variants) uses `config` inside."""
    previous = tuning.OVERRIDES.get(kernel)
    tuning.OVERRIDES[kernel] = config
    try:
        yield config
    finally:
        if previous is None:
            tuning.OVERRIDES.pop(kernel, None)
        else:
            tuning.OVERRIDES[kernel] = previous
