"""How kv_cache_attention cuts a call into programs: the split heuristic and the launch plan.

A call's launch plan is everything its split and merge launches take that follows from the
call's shapes and its launch configurations rather than from any tensor's values: the tiles and
compiler options, the split count, the grids, the scratch's shape.  A decode loop calls with the
same shapes step after step, so `launch_plan` works a plan out once per signature and keeps it
(_plan's cache): a step pays for a look-up, not for the arithmetic and the dicts again.

The launch configurations are looked up on every call, since kernels.tuning's tables and
OVERRIDES may change between calls (a sweep, a test, benchmarks/tune_launch.py), and are part of
the key: a plan never outlives the configurations it was made from.  So is whether launches go
to the device (kernels.launch.set_launcher), which decides the processors the heuristic fills.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from .launch import ceil_div, config_kwargs, head_dim_bound, launches_on_device, next_power_of_2, padded_head_dim
from .launch_tables import LaunchConfig
from .targets import Target
from .tuning import launch_config
from .validation import DTYPE_NAMES

# Programs the split heuristic aims at per processor (num_splits=0), rounded down: a decode step
# is bound by memory bandwidth, and a program streams its key tiles one after another, so a
# processor needs several programs' loads in flight -- one each read a 128k cache at 35 % of an
# H100's copy bandwidth.  Measured on the H100 (benchmarks/decode_probe.py,
# reports/h100-sm90/kv-cache/split-probe/: bf16, D 128, 8 kv heads, pages of 16 and 64, Sq 1
# and 4; share of the copy bandwidth): 8 slices (B 1) x 64 splits 76-79 %, x 32 87-89 %;
# 64 slices (B 8, 128k keys) x 9 splits 84-85 %, x 16 99-100 %, x 32 97-98 %; 256 slices
# (B 32, 4k) x 3 splits 89-91 %, x 16 76-83 %; 1024 slices (B 128, 1k) x 1 86-90 %, x 16
# 55-66 %.  Too few programs leave the last wave short (B 8 x 9 = 576 programs: 4.4 waves of
# 132); more splits than the bandwidth needs cost the merge (it reads every split's partial
# one after another) and per-program set-up.  8 per processor, rounded down, lands on the
# best measured for B 1 (32), B 8 (16) and B 128 (1); B 32 gets 4 splits, which the probe did
# not time (the benchmark at eba9200 read those cells at 83-89 %, reports/h100-sm90/kv-cache/).
PROGRAMS_PER_PROCESSOR = 8
# The most splits the heuristic picks: each split is one more program per (sequence, kv head),
# with its own start (q's rows, the block table) and a [rows, D] fp32 partial that the merge
# reads back one split after another: for B 1 on the H100, 32 splits read at 87-89 % of the
# copy bandwidth, 64 at 76-79 %, 128 at 65-68 % (the probe above).
MAX_SPLITS = 32
# The processors the heuristic fills where no GPU answers: Triton's CPU interpreter (a
# stand-in that still gives a small batch several splits, so that path is the one tested)
# and compile-only launches (CPU tensors standing in for a GPU's).
STAND_IN_PROCESSORS = 8
# Plans kept: one per signature a process decodes with (batch sizes x cache capacities x dtypes).
PLANS_KEPT = 256


def processors(device: torch.device, on_device: bool) -> int:
    """How many multiprocessors (CUs on AMD) the device has, `on_device` where launches go to
    it: what the split heuristic fills; STAND_IN_PROCESSORS where no GPU answers."""
    if on_device and device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return STAND_IN_PROCESSORS


def split_count(requested: int, programs: int, capacity: int, block_n: int, available: int) -> int:
    """The splits of every sequence's keys: `requested` where >= 1; else (0) as many as keep
    the `programs` without splits, times the splits, within PROGRAMS_PER_PROCESSOR per
    processor of the `available` ones (a memory-bound kernel needs several per processor to
    draw the bandwidth), at most MAX_SPLITS and at most the key tiles of the cache's capacity
    per sequence (a split of at least one tile where a sequence fills it; the lengths
    themselves stay on the device), at least 1."""
    if requested:
        return requested
    wanted = PROGRAMS_PER_PROCESSOR * available // max(programs, 1)
    return max(1, min(MAX_SPLITS, wanted, ceil_div(capacity, block_n)))


def row_tile(rows: int, block_m: int) -> int:
    """BLOCK_M of a program: the table's, or fewer where a (sequence, kv head) has fewer rows
    (a power of two >= 16, tl.dot's least); a smaller tile never takes more shared memory or
    registers than the table's, which is what each target's table was fitted to."""
    return min(block_m, max(16, next_power_of_2(rows)))


@dataclass(frozen=True)
class LaunchPlan:
    """The launches of one call signature.  split, merge: the kernels' launch keyword
    arguments (tiles, compiler options), shared by every call of the signature: never changed;
    split_config, merge_config: the configurations they came from, as kernels.tuning's
    record_launch notes them; split_blocks, merge_blocks: grid axis 0 (row tiles x splits,
    row tiles); split_head_dim, merge_head_dim: the head-dim bounds they mask by
    (kernels.launch.head_dim_bound); scratch: the partial outputs' shape (B * Hkv * splits,
    rows, D), the partial lse's its first two."""

    block_d: int
    splits: int
    split: dict[str, int]
    merge: dict[str, int]
    split_config: LaunchConfig
    merge_config: LaunchConfig
    split_blocks: int
    merge_blocks: int
    split_head_dim: int | None
    merge_head_dim: int | None
    scratch: tuple[int, int, int]


def launch_plan(dtype: torch.dtype, head_dim: int, slices: int, rows: int, capacity: int, requested: int,
                dequantize: bool, device: torch.device, target: Target) -> LaunchPlan:
    """The plan of a validated call (kernels.kv_cache): q of `dtype` and `head_dim` on `device`,
    `slices` sequences x kv heads of `rows` rows each, a cache of `capacity` positions per
    sequence (fp8: `dequantize`), `requested` splits (0: split_count's choice), launching to
    `target`.  Its launch configurations are looked up now, the rest made once per signature."""
    block_d = padded_head_dim(head_dim, dtype)
    name = DTYPE_NAMES[dtype]
    split = launch_config("decode_split", block_d, name, target)
    merge = launch_config("decode_merge", block_d, name, target)
    return _plan(dtype, head_dim, block_d, slices, rows, capacity, requested, dequantize, split, merge, device,
                 launches_on_device())


@lru_cache(maxsize=PLANS_KEPT)
def _plan(dtype: torch.dtype, head_dim: int, block_d: int, slices: int, rows: int, capacity: int, requested: int,
          dequantize: bool, split_config: LaunchConfig, merge_config: LaunchConfig, device: torch.device,
          on_device: bool) -> LaunchPlan:
    """launch_plan's plan: a pure function of its arguments, hence cached."""
    split = config_kwargs(split_config, block_d, dtype)
    if dequantize:
        # Head slices are multiplied as stored; an fp8 cache is dequantised on whole tiles.
        split.pop("HEAD_CHUNK", None)
    split["BLOCK_M"] = row_tile(rows, split["BLOCK_M"])
    row_tiles = ceil_div(rows, split["BLOCK_M"])
    splits = split_count(requested, slices * row_tiles, capacity, split["BLOCK_N"], processors(device, on_device))
    merge = config_kwargs(merge_config, block_d, dtype, tiles=("BLOCK_M",))
    merge["BLOCK_M"] = row_tile(rows, merge["BLOCK_M"])
    # Recorded as the launches take them: these kernels stream no tensor descriptors.
    return LaunchPlan(block_d, splits, split, merge,
                      replace(split_config, descriptors=False), replace(merge_config, descriptors=False),
                      row_tiles * splits, ceil_div(rows, merge["BLOCK_M"]),
                      head_dim_bound(head_dim, block_d, split), head_dim_bound(head_dim, block_d),
                      (slices * splits, rows, head_dim))
