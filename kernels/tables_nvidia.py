"""Launch table sets of NVIDIA targets: Ampere's (mma.sync, the tables of sm_80), the same
fitted to 99 KB of shared memory (sm_86, sm_89, consumer Blackwell sm_120 / sm_121), and
Hopper's (sm_90, and datacenter Blackwell sm_100 / sm_103, which have its 227 KB).

Which set a target takes is kernels.tuning's choice, by each set's needs (TableSet) against
the target's facts (kernels.architectures).
"""

from __future__ import annotations

from dataclasses import replace

from .architectures import MMA_SYNC, TCGEN05, WGMMA
from .launch_tables import LaunchConfig, LaunchTable, TableSet, table

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

# Hopper (sm_90, 227 KB of shared memory per block; datacenter Blackwell, sm_100 / sm_103,
# takes the same set: untuned there, the same 227 KB): chosen by
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
# run-to-run noise there, so the forward stays on pointers (not re-judged since).  Measured
# there and not kept: the exponents as one FMA (forward +4-7 %, backward +1-4 %), whose
# error grows with |score * scale| where the exact forms' grows with the distance to the row
# max (the property tests' logits at 6.6e4 and 1.7e10 failed dQ / dV by 84x / 256x torch's
# error); warp specialization (tl.range(warp_specialize=True), triton 3.6 on sm_90): no gain
# with 8 warps (D = 128 455 / 438 at 2 stages), and triton's NVGPUWarpSpecialization pass
# crashes with 4.
_HOPPER_FORWARD = table(
    (64, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
    (128, LaunchConfig(128, 128, num_warps=8, num_stages=3)),
    (256, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
)
# kv_cache_attention's split kernel, which streams a cache once and is bound by memory
# bandwidth: benchmarks/decode_probe.py on an H100 (bf16 and fp16, pages of 16 and 64,
# the split heuristic's counts, 24 cells of 256 MiB to 4 GiB; share of the device's copy
# bandwidth; reports/h100-sm90/kv-cache/decode-tiles-a6624e3/).  Four warps, and long key
# tiles: D = 128, 128 keys, 4 warps, 2 stages (geometric mean 0.997 of each cell's best
# configuration, worst 0.983; the forward's 128-key tile with 8 warps and 3 stages it
# borrowed: 0.92, worst 0.78, at B 128 with one split); D = 64, 128 keys, 4 warps, 3
# stages (0.99 against 0.77 for the forward's 64 keys, 8 warps); D = 256, 64 keys, 4
# warps, 2 stages (the best in all three cells, against 0.91 for the forward's 32 keys,
# 8 warps).  The probe's row tile was 16 (a decode step's rows, kernels.
# decode_plan.row_tile); the 64 (32 at D = 256) here only holds more query tokens x heads
# of one kv head in a tile, so that one read of the cache serves them.  fp32 keeps the
# forward's fp32 tiles, which fit its twice-as-large K and V.
_DECODE_SPLIT = table(
    (64, LaunchConfig(64, 128, num_warps=4, num_stages=3)),
    (128, LaunchConfig(64, 128, num_warps=4, num_stages=2)),
    (256, LaunchConfig(32, 64, num_warps=4, num_stages=2)),
)
# The widest band (keys a row, left + right + 1) the Hopper "window" tables serve: their short
# loops favour smaller query tiles, a wider band's are long enough for the kernels' own rows.
# On an H200 at S = 8k and 16k, bf16 and fp16, causal (reports/h200-sm90/variants/window-fwd-row/):
# the window forward rows 5-11 % faster at 1,025 keys (left 1024), 2-6 % slower at 2,049 and
# 5-13 % at 4,097; the window dQ rows 4-5 % faster at 1,025, 0-2 % slower at 4,097.  1,536 lies
# between the measured points.  A bound of these tables, measured on this family: another
# set's window tables carry their own (LaunchTable.widest_band).
HOPPER_NARROW_BAND_KEYS = 1536
HOPPER_LAUNCH = {
    **CUDA_LAUNCH,
    "fwd": _HOPPER_FORWARD,
    # With dropout the 128x128 forward needs 240 KB of shared memory at 3 stages (the
    # keep-mask tiles add theirs; the standard tier's dropout cases failed to launch):
    # 2 stages there (452 / 424 TFLOP/s without dropout), the other rows unchanged.
    "fwd.dropout": LaunchTable(tuple((bound, replace(config, num_stages=2) if bound == 128 else config)
                                     for bound, config in _HOPPER_FORWARD.rows)),
    # The forward of a packed (varlen) batch: benchmarks/tune_launch.py --varlen on an H100
    # (bf16, the variants benchmark's 16 mixed lengths at S = 8192, causal; TFLOP/s over the
    # visible pairs; reports/h100-sm90/variants/tuning/).  Its many short sequences give short
    # key loops: 64x64 tiles with 4 warps at D = 64 (334 against 291 with the dense 128x64,
    # 8 warps), 128x64 with 8 warps at D = 128 (341 against 322 with 128x128).  Once this
    # table existed, tune_launch replaced only the kernel's general table, which a packed batch
    # no longer reads: its later varlen sweeps (tuning/tile-list/, and the first of session
    # 11) timed this table's row in every row, their spread was noise.  Swept again with each
    # row's configuration launched and confirmed (tuning/tune-varlen-judged/, BLOCK_N 32 and 2
    # stages included, over the tile lists of kernels.packed_tiles): D = 128 keeps 128x64 w8 s3
    # (418 against 381-388 for 64x64 w4 s3, fp16 / bf16).  Two rows led there and were timed
    # in the variants benchmark between two runs of the tables as they are (base, change,
    # base; variants/varlen-rows/), and neither is kept: the forward at D = 64 with
    # 128x64 w8 s3 (+1.5 % bf16, +4.6 % fp16 in the sweep) ran -2.6..+1.2 % in the four
    # D 64 cells; a dQ row of its own for the packed batch at D = 64, 64x64 w4 s3 with
    # descriptors (322 against 309 TFLOP/s for the dense row over the whole backward), ran
    # the varlen backward 0.3-3.1 % faster, as much as the unchanged D 128 cells did
    # (0.2-2.1 %): the machine between the runs, not the row.  A
    # sliding window's forward keeps the dense tables: once its band ran in one loop (kernels.flash_forward),
    # they were within 3 % of the best tile at left 1024 and the best at 4096
    # (tuning/band-loop/, 3 stages only).
    "fwd.varlen": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=3)),
        (128, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
        _HOPPER_FORWARD.rows[-1],
    ),
    # A narrow sliding window's forward (bands of at most HOPPER_NARROW_BAND_KEYS keys a row;
    # wider ones take the dense rows): its loops of a few key tiles favour
    # 64x64 tiles with 4 warps, two programs a processor.  benchmarks/tune_launch.py --window
    # 1024 on an H200 (bf16, S = 8192, causal, 2 and 3 stages, with and without descriptors;
    # reports/h200-sm90/variants/window-fwd-row/): 337 / 361 TFLOP/s against the dense rows'
    # 304 / 346 at D = 64 / 128; in the variants benchmark between two runs of the dense rows
    # the forward at left 1024 5-11 % faster in all 8 cells, at left 2048 2-6 % and at 4096
    # 5-13 % slower (hence the narrow bands only).
    "fwd.window": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=3)),
        _HOPPER_FORWARD.rows[-1],
        widest_band=HOPPER_NARROW_BAND_KEYS,
    ),
    # dQ of a narrow sliding window (the dK/dV kernel keeps its dense rows there): the band's
    # short key loops favour 64-row query tiles with 2 stages.  benchmarks/tune_launch.py
    # --window 1024 on an H200 (bf16, S = 8192, causal; TFLOP/s of the whole backward;
    # reports/h200-sm90/variants/tune-window/): 274 / 314 against the dense row's 260 / 300
    # at D = 64 / 128.  In the variants benchmark between two runs of the dense row
    # (h200-sm90/variants/window-dq-row/): the backward at left 1024 3.8-5.4 % faster in all
    # 8 cells; at left 4096 the dense row 0.1-1.8 % faster (window-fwd-row/rule/).
    "bwd_dq.window": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2, descriptors=True)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=2, descriptors=True)),
        CUDA_LAUNCH["bwd_dq"].rows[-1],
        widest_band=HOPPER_NARROW_BAND_KEYS,
    ),
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
    "decode_split": _DECODE_SPLIT,
    "decode_split.fp32": CUDA_LAUNCH["fwd.fp32"],
    # A paged cache's call of one split whose batch fills the device several times over
    # (kernels.decode_plan.FILLED_PAGED_VARIANT: B 128 with 8 kv heads, 1,024 programs): at
    # D = 128 the 64-key tile in three stages holds 128 registers a thread where the general
    # row's paged kernel holds 234 (triton 3.6, sm_90), four programs a processor instead of two.
    # On an H200, graph-timed, fp16 (reports/h200-sm90/kv-cache/filled-paged-s15/), us a call,
    # 128x4x2 -> 64x4x3: B 128, 1k keys, pages of 64, Sq 1 145.7 -> 135.9, Sq 4 148.7 -> 137.6;
    # pages of 16, Sq 1 148.8 -> 136.7; 4k keys 533.9 -> 507.4, 540.6 -> 508.1, 533.7 -> 515.2.
    # Not where programs are fewer (B 32 with 1k keys, two a processor: 43.9 -> 52.9, two runs)
    # nor for a contiguous cache (128 -> 153 registers; B 128, 4k keys 498.3 -> 507.0, two runs):
    # those keep the general row, as do the split cells (B 1 with 128k keys: 139.3 -> 185.7).  On an H100
    # (bf16, eager-timed, reports/h100-sm90/kv-cache/decode-tiles-a6624e3/) the two rows read
    # within 1.6 % of each other at B 128 (1k keys: 191.2 against 194.1 us at pages of 16, Sq 4;
    # 4k keys 0.4-0.8 % slower): not graph-timed there, and bf16 not on the H200.
    "decode_split.filled_paged": table(
        _DECODE_SPLIT.rows[0], (128, LaunchConfig(64, 64, num_warps=4, num_stages=3)), _DECODE_SPLIT.rows[2]),
}


# The most shared memory each set's configurations take, from the compile-only tier's full
# scope (triton 3.9, reports/compile/): Ampere's forward at D = 128 with dropout, 128x64 in
# 3 stages, 106,496 B (98,304 without the keep-mask tiles); Hopper's 128x128 forward in 3
# stages, 229,376 B.
AMPERE = TableSet("ampere", CUDA_LAUNCH, (MMA_SYNC, WGMMA, TCGEN05), 32, 106_496, 255,
                  "the Triton fused-attention tutorial's tiles, fitted by compile-only measurements")
HOPPER = TableSet("hopper", HOPPER_LAUNCH, (WGMMA, TCGEN05), 32, 229_376, 255,
                  "tuned on an H100 with benchmarks/tune_launch.py, reports/h100-sm90/tuning/")

# 99 KB of shared memory (sm_86, sm_89, sm_120, sm_121: 101,376 B): Ampere's tables but for
# the forward with dropout at D = 128 in 2 stages: in 3 it takes the 106,496 B above
# (Hopper's 128x128 in 2 stages takes 114,688 B, its dQ with descriptors 139,296 B: what
# sm_120 could not launch while it took Hopper's set, issue 32).
# Nothing else of Ampere's set takes more than 100,352 B (fp32 dK/dV at D = 256, 16x32).  No
# descriptors: sm_120 has a TMA unit, but none of these tiles was measured with it.
_TWO_STAGE_FORWARD_AT_128 = replace(CUDA_LAUNCH["fwd"].pick(128), num_stages=2)
AMPERE_99KB = TableSet(
    "ampere-99kb", {**CUDA_LAUNCH, "fwd.dropout": CUDA_LAUNCH["fwd"].replaced(128, _TWO_STAGE_FORWARD_AT_128)},
    (MMA_SYNC, WGMMA, TCGEN05), 32, 100_352, 255,
    "Ampere's tiles with a 2-stage forward under dropout at D = 128, fitted to 99 KB by compile-only measurements")

# Richest first: a target takes the first set it can (kernels.tuning.table_set).
NVIDIA_SETS = (HOPPER, AMPERE, AMPERE_99KB)
