"""Launch configurations of the bundled kernels, per target: the kernels' own tuning.

One table set per target family, picked by what triton reports about the device
(kernels.targets): tile shapes, warps, stages and backend knobs for every kernel
role, by head dim and (where fp32 tiles need smaller blocks) by dtype.  A test
harness may read these tables (e.g. to compile every configuration for a target
without its GPU); it does not own them.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

from .targets import Target, current_target

# The kernels a launch table set covers (the piecewise kernels have tables of their own).
KERNELS = ("fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", "total")

# Compiler options only some Triton backends take: a launch passes one only where
# its table sets it (triton rejects options its backend does not know).
BACKEND_KNOBS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


@dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and scheduling knobs of one kernel launch.

    waves_per_eu, matrix_instr_nonkdim, kpack: options of Triton's AMD backend
    (occupancy hint, MFMA instruction shape, operand packing); None = not passed.
    descriptors: stream the loop's tiles through tensor descriptors (the TMA unit on
    Hopper) where the target and the tensors allow it (kernels.launch), else pointers.
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 1
    waves_per_eu: int | None = None
    matrix_instr_nonkdim: int | None = None
    kpack: int | None = None
    descriptors: bool = False

    def options(self) -> dict:
        """The compiler options a launch passes: warps, stages and every knob that is set."""
        knobs = {name: getattr(self, name) for name in BACKEND_KNOBS if getattr(self, name) is not None}
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **knobs}

    def as_dict(self) -> dict:
        """Tile sizes and options, unset knobs left out."""
        return {"block_m": self.block_m, "block_n": self.block_n, **self.options(),
                **({"descriptors": True} if self.descriptors else {})}


@dataclass(frozen=True)
class LaunchTable:
    """Launch configs of one kernel, chosen by head dim: the first row whose
    `max_head_dim` is >= the (padded) head dim wins."""

    rows: tuple[tuple[int, LaunchConfig], ...]

    def pick(self, head_dim: int) -> LaunchConfig:
        for max_head_dim, config in self.rows:
            if head_dim <= max_head_dim:
                return config
        raise ValueError(f"no launch config for head_dim={head_dim}")


def table(*rows: tuple[int, LaunchConfig]) -> LaunchTable:
    return LaunchTable(tuple(rows))


def map_tables(tables: dict[str, LaunchTable], change) -> dict[str, LaunchTable]:
    """Every config of every table passed through `change(config) -> config`."""
    return {name: LaunchTable(tuple((bound, change(config)) for bound, config in tab.rows))
            for name, tab in tables.items()}


# Ampere and newer NVIDIA GPUs. Tiles follow the Triton fused-attention tutorial's
# proven shapes; D=128 needs 8 warps to keep the fp32 accumulators in registers.
# D=256 (and 192, padded to 256) halves the key tile so K/V stages fit the 99 KB of
# shared memory a block gets on sm_86/sm_89 (sm_80: 163 KB, sm_90: 227 KB).
CUDA_LAUNCH = {
    "fwd": table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=3)),
        (128, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
        (256, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
    ),
    # delta = rowsum(dO * O) holds two [BLOCK_M, D] fp32 tiles: fewer rows as D grows
    # keep them in registers (128 rows at D = 256 spilled 2.7-6.7 KB, triton 3.2-3.9).
    "bwd_preprocess": table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=1)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=1)),
        (256, LaunchConfig(32, 64, num_warps=4, num_stages=1)),
    ),
    "bwd_dkdv": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "total": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 64, num_warps=8, num_stages=1)),
    ),
    # fp32 tiles are twice as large: smaller blocks keep them within the 99 KB of
    # shared memory that sm_86/sm_89 offer a block (sm_80/sm_90 have more).  fp32
    # ("ieee") dots run on FMA units, not tensor cores; with 4 warps the forward
    # spilled 0.8-1.1 KB at D = 64 and the kernels 1.6-54 KB at D = 128 (ptxas,
    # sm_80/sm_90, triton 3.9); 8 warps and 16-row or 16-key tiles keep them in registers.
    "fwd.fp32": table(
        (64, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dkdv.fp32": table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq.fp32": table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
        (256, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
    ),
    "total.fp32": table(
        (128, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    # piecewise kernels hold two score tiles (near and far) per block: tiles chosen
    # for zero register spills on sm_90 (compile probe, triton 3.9), all within the
    # ~99 KB of shared memory sm_86/sm_89 allow.
    "piecewise_fwd": table((64, LaunchConfig(128, 64, 8, 3)), (128, LaunchConfig(64, 32, 8, 2)),
                           (256, LaunchConfig(32, 32, 8, 2))),
    "piecewise_bwd_dkdv": table((64, LaunchConfig(32, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                                (256, LaunchConfig(16, 32, 8, 1))),
    "piecewise_bwd_dq": table((64, LaunchConfig(64, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                              (256, LaunchConfig(32, 16, 8, 1))),
    "piecewise_fwd.fp32": table((64, LaunchConfig(64, 32, 8, 2)), (128, LaunchConfig(32, 32, 8, 2)),
                                (256, LaunchConfig(16, 16, 4, 1))),
    "piecewise_bwd_dkdv.fp32": table((64, LaunchConfig(16, 32, 4, 1)), (128, LaunchConfig(16, 32, 4, 1)),
                                     (256, LaunchConfig(16, 16, 8, 1))),
    "piecewise_bwd_dq.fp32": table((64, LaunchConfig(32, 32, 8, 1)), (128, LaunchConfig(32, 16, 4, 1)),
                                   (256, LaunchConfig(16, 16, 8, 1))),
}

# Hopper (sm_90 and newer, 227 KB of shared memory per block): chosen by
# benchmarks/tune_launch.py on an H100 (fp16, B*S = 32k, H*D = 2048, S = 8192, triton 3.6;
# TFLOP/s non-causal / causal).  Forward D <= 64: 128x64, 8 warps, 3 stages (404 / 387;
# the general table's 4 warps gave 374 / 349); D <= 128: 128x128, 8 warps, 3 stages
# (474 / 430; 128x64 gave 448 / 418).  Tensor descriptors (TMA) slowed the forward
# (D = 128: 473 against 491 non-causal; D = 64: 392 against 419), so it loads through
# pointers.  The backward, whole pass timed while one kernel's table varied: dK/dV 64x64
# with 4 warps at both head dims (D = 128: 361 / 331, against 321 / 309 for 128x64 with 8
# warps and 254 / 234 for 128x128; D = 64: 318 / 302, 128x64: 296 / 278), streaming Q and
# dO through descriptors (D = 128, 2 stages: 407 / 372; D = 64, 3 stages: 328 / 313); dQ
# 128x64 with 3 stages, K and V through descriptors (D = 128, 8 warps: 366 / 336, pointers
# 361 / 329; D = 64, 4 warps: 337 / 325, pointers 323 / 303).
# Re-measured with unmasked off-band loads (blocks.below; reports/h100-sm90/tuning/unmasked-fma/,
# 1-forward-variants): the same tiles stay best; descriptors slower at D = 64 (389-398 against
# 412 non-causal) and 2 % faster at D = 128 (472 / 452 against 462 / 445) in one run, within
# run-to-run noise there, so the forward stays on pointers (not re-judged since).  Measured there and not kept: the exponents as one FMA (forward
# +4-7 %, backward +1-4 %), whose error grows with |score * scale| where the exact forms'
# grows with the distance to the row max (the property tests' logits at 6.6e4 and 1.7e10
# failed dQ / dV by 84x / 256x torch's error); warp specialization (tl.range(warp_specialize=
# True), triton 3.6 on sm_90): no gain with 8 warps (D = 128 455 / 438 at 2 stages), and
# triton's NVGPUWarpSpecialization pass crashes with 4.
_HOPPER_FORWARD = table(
    (64, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
    (128, LaunchConfig(128, 128, num_warps=8, num_stages=3)),
    (256, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
)
HOPPER_LAUNCH = {
    **CUDA_LAUNCH,
    "fwd": _HOPPER_FORWARD,
    # With dropout the 128x128 forward needs 240 KB of shared memory at 3 stages (the
    # keep-mask tiles add theirs; the standard tier's dropout cases failed to launch):
    # 2 stages there (452 / 424 TFLOP/s without dropout), the other rows unchanged.
    "fwd.dropout": LaunchTable(tuple((bound, replace(config, num_stages=2) if bound == 128 else config)
                                     for bound, config in _HOPPER_FORWARD.rows)),
    "bwd_dkdv": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=3, descriptors=True)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=2, descriptors=True)),
        CUDA_LAUNCH["bwd_dkdv"].rows[-1],
    ),
    "bwd_dq": table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=3, descriptors=True)),
        (128, LaunchConfig(128, 64, num_warps=8, num_stages=3, descriptors=True)),
        CUDA_LAUNCH["bwd_dq"].rows[-1],
    ),
    # piecewise dK/dV at D <= 128 in one stage: with its near, crossing and far query loops
    # (piecewise_blocks), the general table's 32x64 tile with 2 stages gave wrong dK1/dK2 on
    # an H100 (triton 3.6; 8 or 4 warps; ratios 4.6-348 in the standard and long tiers,
    # 1 of 12 cases passing on a re-run) while the interpreter's results were bit for bit
    # those of the selecting path; 1 stage, and 64x64 with 2 stages, passed all 12.
    "piecewise_bwd_dkdv": table(
        CUDA_LAUNCH["piecewise_bwd_dkdv"].rows[0],
        (128, LaunchConfig(32, 64, num_warps=8, num_stages=1)),
        CUDA_LAUNCH["piecewise_bwd_dkdv"].rows[-1],
    ),
}

def _hip_tile(config: LaunchConfig) -> LaunchConfig:
    """A CUDA tile made for AMD: 4 wavefronts (256 threads, the most that still leave
    each thread all 512 VGPRs of a CDNA SIMD) and one stage (the triton attention
    tutorial's only HIP stage count, least LDS)."""
    return replace(config, num_warps=4, num_stages=1)


# Untuned on hardware (no AMD card here); chosen from compile-only measurements
# (gfx942, triton 3.9, causal + dropout): the CUDA tiles with 4 wavefronts compiled
# without spills except the three overridden below (dkdv fp32 D=256: 132 B per
# thread; piecewise dkdv fp16 D=128/256: 524/28 B), whose smaller tiles also keep
# triton 3.2's LDS within 64 KiB on gfx90a (16x32 fp32 dkdv took 80 KiB there).
# 8 wavefronts halve the VGPRs a thread may have (256) and spilled in 19 of 48
# configurations; waves_per_eu=2 (which also caps them at 256) spilled in 31 of 48
# with 2 wavefronts.  The tutorial's waves_per_eu=2 is kept on the forward up to
# D=64 (at most 214 VGPRs there, so the hint only pins 2 waves per SIMD); at D=128
# it spilled 48 B on gfx90a, and the tutorial's 3 (168 VGPRs) spills at D=64.
def _tile(block_m: int, block_n: int, waves_per_eu: int | None = None) -> LaunchConfig:
    return LaunchConfig(block_m, block_n, num_warps=4, num_stages=1, waves_per_eu=waves_per_eu)


# dK/dV: 32 query rows per step (as the triton tutorial's dK/dV loop has), not 64: with
# 64x64 the fp16/bf16 kernel spilled vector registers at D = 64 with dropout and at
# D = 128 (6-13 VGPRs, 44-72 B of scratch per thread, gfx90a/gfx942, triton 3.9 with
# the unmasked tiles); with 32x64 none of the 64 fp16/bf16 variants spill a vector
# register on either target.  What scratch remains there (20 B per thread in about a
# third of them) holds scalar registers: the kernel's ~50 scalar arguments (8 pointers,
# 24 strides) fill the 102 SGPRs, whatever the tile.
HIP_LAUNCH = {
    **map_tables(CUDA_LAUNCH, _hip_tile),
    "bwd_dkdv": table((64, _tile(32, 64)), (128, _tile(32, 64)), (256, _tile(32, 32))),
    "fwd": table((64, _tile(128, 64, 2)), (128, _tile(128, 64)), (256, _tile(64, 32))),
    "fwd.fp32": table((64, _tile(64, 32, 2)), (256, _tile(16, 32))),
    "bwd_dkdv.fp32": table((64, _tile(32, 32)), (128, _tile(32, 16)), (256, _tile(16, 16))),
    "piecewise_bwd_dkdv": table((64, _tile(32, 32)), (128, _tile(32, 32)), (256, _tile(16, 16))),
    # piecewise dQ with its near, crossing and far key loops: 32x64 at D = 128 filled the
    # 512 VGPRs (gfx942 fp16 spilled 31, 128 B of scratch); 32x32 takes 272-325, no spill.
    "piecewise_bwd_dq": table((64, _tile(64, 32)), (128, _tile(32, 32)), (256, _tile(32, 16))),
}

# RDNA runs 32-wide waves with at most 256 VGPRs each: 8 waves keep the 256 threads
# per block of the CDNA tables (with 4, gfx1100 spilled 2.5-3.4 KB per thread at
# D=128 in the compile-only tier; with 8 still 0.5-2.5 KB: RDNA needs smaller tiles
# that nobody has chosen yet). No waves_per_eu: not measured there.
RDNA_LAUNCH = map_tables(HIP_LAUNCH, lambda config: replace(config, num_warps=8, waves_per_eu=None))


ILUVATAR_LAUNCH = map_tables(CUDA_LAUNCH, lambda config: replace(config, num_warps=max(1, config.num_warps // 2)))

# Under the interpreter every program instance is a numpy evaluation: large tiles
# mean fewer, more vectorised instances, which is what makes the smoke tier fast.
INTERPRETER_LAUNCH = {
    "fwd": table((256, LaunchConfig(64, 64))),
    "bwd_preprocess": table((256, LaunchConfig(64, 64))),
    "bwd_dkdv": table((256, LaunchConfig(64, 64))),
    "bwd_dq": table((256, LaunchConfig(64, 64))),
    "total": table((256, LaunchConfig(64, 64))),
}



def launch_tables(target: Target) -> dict[str, LaunchTable]:
    """The table set of a target: NVIDIA (Hopper and newer, or older), AMD CDNA (64-wide waves) or RDNA (32), Iluvatar
    CoreX (CUDA-compatible, 64-wide warps), or the interpreter."""
    if target.interpreted:
        return INTERPRETER_LAUNCH
    if target.corex:
        return ILUVATAR_LAUNCH
    if target.backend == "hip":
        return HIP_LAUNCH if target.warp_size == 64 else RDNA_LAUNCH
    return HOPPER_LAUNCH if target.arch >= 90 else CUDA_LAUNCH


# kernel -> the configuration every launch of it uses instead of its tables' (set by
# kernels.tuning_space.configured: a sweep or a tuning script judging one configuration).
# A plain dict, not a context variable: autograd runs the backward's launches on a thread
# of its own.
OVERRIDES: dict[str, LaunchConfig] = {}


def launch_config(kernel: str, head_dim: int, dtype: str = "fp16", target: Target | None = None,
                  variant: str | None = None) -> LaunchConfig:
    """Launch config of `kernel` for a (padded) head dim and input dtype name on `target`
    (default: the current one).  A table keyed `"{kernel}.{dtype}"` (e.g. `fwd.fp32`, whose
    tiles take twice the shared memory) overrides the kernel's general table, and so, for
    the other dtypes, does `"{kernel}.{variant}"` (e.g. `fwd.dropout`, whose random-number
    tiles need shared memory of their own).  An override (OVERRIDES) wins over every table."""
    if kernel in OVERRIDES:
        return OVERRIDES[kernel]
    tables = launch_tables(target or current_target())
    keys = (f"{kernel}.{dtype}", *((f"{kernel}.{variant}",) if variant else ()), kernel)
    for key in keys:
        if key in tables:
            return tables[key].pick(head_dim)
    raise KeyError(f"no launch table for kernel {kernel!r}")


# kernel -> the configuration it launched with, while a `recorded_launches()` is open (None
# otherwise); kernels.launch records every launch.  A plain dict, as OVERRIDES is.
_launched: dict[str, LaunchConfig] | None = None


@contextmanager
def recorded_launches():
    """Yields a dict that fills, as the kernels launch inside, with kernel -> the configuration
    it launched with (its table's or an override), `descriptors` as the launch really took
    them: what a harness reads to confirm that a configuration it set was the one used."""
    global _launched
    previous, _launched = _launched, {}
    try:
        yield _launched
    finally:
        _launched = previous


def record_launch(kernel: str, config: LaunchConfig) -> None:
    """Note `config` as `kernel`'s launch in the open `recorded_launches()`, if one is."""
    if _launched is not None:
        _launched[kernel] = config
