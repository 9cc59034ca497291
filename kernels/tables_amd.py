"""Launch table sets of AMD targets: CDNA's (gfx90a, gfx942, gfx950: 64-wide waves, 512
VGPRs per work-item) and RDNA's (32-wide waves, 256 VGPRs), RDNA3 (gfx11) apart from
RDNA4 (gfx12) because gfx11's WMMA holds each operand twice.

Untuned on hardware (no AMD card here): every tile is chosen from compile-only
measurements (`python -m conformance compile`, triton 3.9), so that fp16/bf16 kernels keep
their vector registers out of scratch memory where any tile can.  Which set a target takes
is kernels.tuning's choice, by each set's needs (TableSet) against the target's facts.
"""

from __future__ import annotations

from dataclasses import replace

from .architectures import MFMA, WMMA_GFX11, WMMA_GFX12
from .launch_tables import LaunchConfig, LaunchTable, TableSet, map_tables, table, with_warps
from .tables_nvidia import CUDA_LAUNCH


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

# CDNA (gfx90a, gfx942; gfx950 too: untuned there, its 160 KiB of LDS unused by these
# tiles).  The most LDS any configuration takes: 32,768 B (the forward at D = 128, compile-only
# full scope, triton 3.9, reports/compile/).
CDNA = TableSet("cdna", HIP_LAUNCH, (MFMA,), 64, 32_768, 512,
                "untuned: the CUDA tiles with 4 wavefronts and one stage, fitted by compile-only measurements")

# RDNA runs 32-wide waves with at most 256 VGPRs each: the CDNA tiles with 8 waves (the
# 256 threads per block of the CDNA tables) where they keep fp16/bf16 out of scratch, smaller
# tiles where not.  No waves_per_eu: not measured there.  Figures: VGPRs of the causal
# kernel with dropout at the row's largest head dim (compile-only, triton 3.9).
RDNA_BASE = with_warps(HIP_LAUNCH, 8)


def _wave32(block_m: int, block_n: int, num_warps: int = 8, head_chunk: int | None = None) -> LaunchConfig:
    """An RDNA tile: one stage (as CDNA's), `num_warps` 32-wide waves, no occupancy hint,
    the head dim sliced by `head_chunk` (kernels.head_slices) where set."""
    return LaunchConfig(block_m, block_n, num_warps=num_warps, num_stages=1, head_chunk=head_chunk)


# fp32 on RDNA: no fp32 WMMA, so FMA dots, where each thread holds whole rows of both
# operands.  Whole tiles spilled in every kernel from D = 128 (0.6 to 3.5 KB per thread; the
# CDNA tiles 0.5-4.5 KB in every kernel but the delta pre-pass; in git history) and, with
# triton 3.6, the dQ and piecewise forward at D = 64 (40-172 B) and total attention at 128
# (672 B).  Sliced, 16x16 tiles with 8 waves spill in none (compile-only, gfx1100, triton 3.6
# and 3.9, every variant): forward 123-169 VGPRs, dQ 67-183, dK/dV 187-248, total 46-61;
# the piecewise dK/dV at D = 256 with 16 waves (8 spilled 72-124 B in its causal variant with
# triton 3.6).  The forward keeps its whole 32x16 tile with 16 waves at D = 64 (166 VGPRs).
# Triton 3.2 gave whole-tile fp32 dK/dV at D = 256 67,584 B of LDS, over RDNA's 64 KiB (3.9: 33,792).
def _fp32_sliced(at_64: LaunchConfig) -> LaunchTable:
    """An fp32 table of a slicing kernel: `at_64` up to D = 64, 16x16 tiles with the head dim
    sliced in eight above (16 columns at 128, 32 at 256)."""
    return table((64, at_64), (128, _wave32(16, 16, 8, 16)), (256, _wave32(16, 16, 8, 32)))


RDNA_FP32 = {
    "fwd.fp32": _fp32_sliced(_wave32(32, 16, 16)),
    "bwd_dq.fp32": _fp32_sliced(_wave32(16, 16, 8, 16)),
    "bwd_dkdv.fp32": _fp32_sliced(_wave32(16, 16, 8, 16)),
    "total.fp32": table((64, _wave32(32, 16)), (128, _wave32(16, 16, 8, 16)), (256, _wave32(16, 16, 8, 32))),
    "piecewise_fwd.fp32": _fp32_sliced(_wave32(16, 16, 8, 16)),
    "piecewise_bwd_dkdv.fp32": table((64, _wave32(16, 16, 8, 16)), (128, _wave32(16, 16, 8, 16)),
                                     (256, _wave32(16, 16, 16, 32))),
    "piecewise_bwd_dq.fp32": _fp32_sliced(_wave32(16, 16, 8, 16)),
}


# RDNA4 (gfx12: WMMA without operand replication).  The CDNA tiles spilled 30 of 48
# configurations (issue 32).  The forward at D = 128 in 128x32 (193 VGPRs; 128x64 spilled 20
# in bf16 with dropout); dK/dV 32x32 at D <= 64 (198; 32x64 spilled 93), 32x16 at 128 (213;
# 32x32 spilled 150); dQ 64x32 at 128 (220; 64x64 spilled 30).  At D = 256 the held operands
# alone filled the registers (a wave holds whole 16x256 tiles, 64 VGPRs each: 16x16 dK/dV with
# 16 waves still spilled 36-260 B per thread), so there, and for piecewise attention's two
# score products from D = 128, the head dim is sliced (kernels.head_slices, 32 columns at
# 256, 16 at 128: eight slices, a loop the compiler keeps; four were unrolled and spilled):
# forward 64x32 (182-189 VGPRs, causal with dropout the most), dK/dV 32x32 (226-249; 32x16
# spilled 136-148 in two variants), dQ 32x16 (138-177); piecewise as RDNA3's below.
_SLICED_256 = _wave32(32, 16, 8, 32)
_PIECEWISE_SLICED = {
    "piecewise_fwd": table((64, _wave32(64, 32)), (128, _wave32(64, 16, 8, 16)), (256, _wave32(32, 32, 8, 32))),
    "piecewise_bwd_dkdv": table((64, _wave32(16, 16)), (128, _wave32(32, 16, 8, 16)),
                                (256, _wave32(16, 16, 8, 32))),
    "piecewise_bwd_dq": table((64, _wave32(32, 16, 8, 16)), (128, _wave32(64, 16, 8, 16)), (256, _SLICED_256)),
}
RDNA4_LAUNCH = {
    **RDNA_BASE,
    **RDNA_FP32,
    **_PIECEWISE_SLICED,
    "fwd": table((64, _wave32(128, 64)), (128, _wave32(128, 32)), (256, _wave32(64, 32, 8, 32))),
    "bwd_dkdv": table((64, _wave32(32, 32)), (128, _wave32(32, 16)), (256, _wave32(32, 32, 8, 32))),
    "bwd_dq": table((64, _wave32(64, 64)), (128, _wave32(64, 32)), (256, _SLICED_256)),
}
# The most LDS any RDNA configuration takes: 49,152 B (piecewise dK/dV in fp32 at D = 256,
# compile-only, triton 3.9), both sets.
RDNA4 = TableSet("rdna4", RDNA4_LAUNCH, (WMMA_GFX12,), 32, 49_152, 256,
                 "untuned: tiles chosen by compile-only measurements to keep fp16/bf16 vector registers "
                 "out of scratch, the head dim sliced where whole operands fill them")

# RDNA3 (gfx11: WMMA holds A and B twice, in both half-waves, so every operand takes twice
# RDNA4's VGPRs).  Whole tiles at D <= 64 (VGPRs, causal with dropout): forward 128x32 (214;
# 128x64 spilled 25), dQ 64x16 and dK/dV 32x16 (237, 213), piecewise forward 64x32 and dK/dV
# 16x16 (237, 238).  From D = 128 the held operands (Q and dO, or K and V: 16 x D each, 128
# VGPRs apiece at D = 128) filled the 256 VGPRs whatever the tile (400 B to 2.9 KB of scratch
# per thread), so the head dim is sliced there (kernels.head_slices; 16 columns at 128, 32 at
# 256: eight slices, a loop the compiler keeps, where four were unrolled and spilled 48-400 B):
# at 128 forward 64x32 (168-171), dQ 64x32 (168-177), dK/dV 32x16 (145-178; 64x16 250);
# at 256 forward 32x32 (160-180; 64x32 247), dQ 32x16 (138-193), dK/dV 32x16 with 16 waves
# (147-176; with 8 waves 252); piecewise forward 64x16 and 32x32 (143, 180), dK/dV 32x16 and
# 16x16 (174, 217-218; 32x32 spilled 372 B and 1.3 KB), dQ 64x16 and 32x16 (192-199, 249-250),
# and its dQ at 64 sliced too (32x16 whole spilled 20-24 B).
RDNA3_LAUNCH = {
    **RDNA_BASE,
    **RDNA_FP32,
    **_PIECEWISE_SLICED,
    "fwd": table((64, _wave32(128, 32)), (128, _wave32(64, 32, 8, 16)), (256, _wave32(32, 32, 8, 32))),
    "bwd_dq": table((64, _wave32(64, 16)), (128, _wave32(64, 32, 8, 16)), (256, _SLICED_256)),
    "bwd_dkdv": table((64, _wave32(32, 16)), (128, _wave32(32, 16, 8, 16)), (256, _wave32(32, 16, 16, 32))),
    "total": table((64, _wave32(64, 64)), (128, _wave32(64, 64, 8, 16)), (256, _wave32(32, 64, 8, 32))),
}
RDNA3 = TableSet("rdna3", RDNA3_LAUNCH, (WMMA_GFX11, WMMA_GFX12), 32, 49_152, 256,
                 "untuned: tiles chosen by compile-only measurements to keep fp16/bf16 vector registers "
                 "out of scratch, the head dim sliced where whole operands fill them")

# Every figure above is triton 3.9's, with the slice loops' trip count the compile-time
# BLOCK_D.  Triton 3.6 unrolled even eight slices and spilled again (gfx1201 dK/dV and
# piecewise dK/dV and dQ at D = 256, 12-140 B per thread; reports/compile/ at 5904c88); the
# loops now run to the run-time head dim (kernels.head_slices), which both keep as loops.
# RDNA3's half-precision total attention is sliced from D = 128: with triton 3.6 its whole
# 64x64 and 32x64 tiles spilled 68-356 B (96-104 VGPRs sliced).

# Richest first: a target takes the first set it can (kernels.tuning.table_set).
AMD_SETS = (CDNA, RDNA4, RDNA3)
