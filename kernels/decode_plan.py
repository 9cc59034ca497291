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

# The split heuristic (num_splits=0).  A decode step is bound by memory bandwidth; its cost
# beyond reading the cache is per split (each program's start: q's rows, the block table, the
# first loads' latency; each split's partial written and read back by the merge, one launch
# more) -- which a CUDA graph, as a serving loop replays a step, no longer hides behind host
# time.  So: enough programs to keep every processor busy (FILL per processor), more (up to
# DEEP per processor) only where each split still streams LONG_SPLIT_TILES key tiles or more,
# and never a split of fewer than MIN_SPLIT_TILES tiles.  Fitted on the H100 (132 SMs), bf16,
# D 128 (128-key tiles), 8 kv heads, graph-timed (benchmarks/decode_probe.py --timing graph,
# reports/h100-sm90/kv-cache/split-probe-graph/; share of the copy bandwidth): B 1, 4k keys: 16
# splits 30 %, 32 24 %; B 8, 4k: 4 splits 79 %, 16 66 %; B 32, 1k: 1 split 83 %, 4 73 %; B 8,
# 1k: 4 splits 54 %, 8 45 %; B 128, 1k: 1 split 94 %.  Long caches want the deep end
# (reports/h100-sm90/kv-cache/split-probe/: B 8 with 128k keys, 16 splits 99-100 % where 9
# read 84-85 %; B 1 with 128k, 32 splits 87-89 %, 64 76-79 %).  Since the merge reads every
# split in one pass (1.9-2.7 us a call in reports/h100-sm90/kv-cache/merge-tile-3ab1a5a/'s
# cells but Sq 4 with 32 splits, 4.3; the two-pass merge took 4.4-7.8), a split of one tile pays where
# two tiles a split leave processors idle (reports/h100-sm90/kv-cache/merge-one-pass/: B 1,
# 1k keys, 8 splits 10.0-10.3 us a call against 4 splits' 12.3-12.7; B 1, 4k, 32 splits 38 %
# of the copy bandwidth against 16 splits' 33-34 %).
FILL_PROGRAMS_PER_PROCESSOR = 2
DEEP_PROGRAMS_PER_PROCESSOR = 8
LONG_SPLIT_TILES = 16
MIN_SPLIT_TILES = 1
# The most splits the heuristic picks: each split is one more program per (sequence, kv head),
# with its own start (q's rows, the block table) and a [rows, D] fp32 partial that the merge
# reads back: for B 1 on the H100, 32 splits read at 87-89 % of the copy bandwidth, 64 at
# 76-79 %, 128 at 65-68 % (the probe above, before the merge read many splits at once).
MAX_SPLITS = 32
# The merge reads up to MERGE_SPLIT_BLOCK splits' partials as one [rows, splits, columns] fp32
# tile of at most MERGE_TILE_ELEMENTS, cutting the head dim into as many programs as that takes
# (kernels.decode_forward.decode_merge_kernel): MAX_SPLITS, so that the heuristic's splits are
# merged in one pass.  A small tile (4 KiB: 8 registers a thread at 4 warps) means more, shorter
# programs, which is what a merge of a few microseconds wants: on the H100, graph-timed, bf16,
# pages of 16 (reports/h100-sm90/kv-cache/merge-tile-3ab1a5a/), 1,024 elements against the 8,192
# before: Sq 4, B 8, 1k keys, 27.0 -> 21.5 us a call (the merge 8.2 -> 2.7 us); Sq 4, B 1, 1k
# 12.2 -> 9.3; Sq 1, B 1, 1k 10.2 -> 9.0; the other four of the seven cells within 0.2 % or
# faster (2,048 and 4,096 elements in between).
MERGE_SPLIT_BLOCK = MAX_SPLITS
MERGE_TILE_ELEMENTS = 1024
# The processors the heuristic fills where no GPU answers: Triton's CPU interpreter (a
# stand-in that still gives a small batch several splits, so that path is the one tested)
# and compile-only launches (CPU tensors standing in for a GPU's).
STAND_IN_PROCESSORS = 8
# The launch tables' variant (kernels.tuning.launch_config) of the split kernel for a paged
# cache whose call has one split and at least FILLED_PROGRAMS_PER_PROCESSOR programs a
# processor: each program streams a whole sequence through its block table, and the batch
# fills the device several times over, which may want other tiles than a split call's
# (kernels.tables_nvidia: on an H200 they help B 128 and cost B 32 with 1k keys, 2 programs a
# processor, and the contiguous cache, whose kernel holds fewer registers).  A table set
# without the variant keeps its general decode_split table.
# 4 lies between the measured points, about 2 programs a processor (B 32, where the row lost)
# and 7.8 (B 128 on 132 SMs, where it gained); no batch in between was measured.
FILLED_PAGED_VARIANT = "filled_paged"
FILLED_PROGRAMS_PER_PROCESSOR = 4
# Plans kept: one per signature a process decodes with (batch sizes x cache capacities x dtypes).
PLANS_KEPT = 256


def processors(device: torch.device, on_device: bool) -> int:
    """How many multiprocessors (CUs on AMD) the device has, `on_device` where launches go to
    it: what the split heuristic fills; STAND_IN_PROCESSORS where no GPU answers."""
    if on_device and device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return STAND_IN_PROCESSORS


def split_count(requested: int, programs: int, capacity: int, block_n: int, available: int) -> int:
    """The splits of every sequence's keys: `requested` where >= 1; else (0) as many as bring
    the `programs` without splits, times the splits, to FILL_PROGRAMS_PER_PROCESSOR per
    processor of the `available` ones -- or up to DEEP_PROGRAMS_PER_PROCESSOR where each split
    of the cache's capacity per sequence keeps LONG_SPLIT_TILES key tiles -- at most MAX_SPLITS,
    each split at least MIN_SPLIT_TILES tiles of the capacity (the lengths themselves stay on
    the device), at least 1.  See the constants for the measurements behind them."""
    if requested:
        return requested
    tiles = ceil_div(capacity, block_n)
    fill = FILL_PROGRAMS_PER_PROCESSOR * available // max(programs, 1)
    deep = min(DEEP_PROGRAMS_PER_PROCESSOR * available // max(programs, 1), tiles // LONG_SPLIT_TILES)
    return max(1, min(MAX_SPLITS, max(fill, deep), tiles // MIN_SPLIT_TILES))


def merge_tiles(splits: int, block_m: int, block_d: int) -> dict[str, int]:
    """The merge's SPLIT_BLOCK, BLOCK_D (head-dim columns per program) and DIM_CHUNKS for
    `splits` splits of `block_m`-row tiles, head dim padded to `block_d`: every power of two."""
    split_block = min(next_power_of_2(splits), MERGE_SPLIT_BLOCK)
    columns = max(16, min(block_d, MERGE_TILE_ELEMENTS // (split_block * block_m)))
    return {"SPLIT_BLOCK": split_block, "BLOCK_D": columns, "DIM_CHUNKS": block_d // columns}


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
    row tiles x head-dim chunks); split_head_dim, merge_head_dim: the head-dim bounds they mask by
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
                dequantize: bool, paged: bool, device: torch.device, target: Target) -> LaunchPlan:
    """The plan of a validated call (kernels.kv_cache): q of `dtype` and `head_dim` on `device`,
    `slices` sequences x kv heads of `rows` rows each, a cache of `capacity` positions per
    sequence (fp8: `dequantize`; `paged`: through a block table), `requested` splits (0:
    split_count's choice), launching to `target`.  Its launch configurations are looked up
    now, the rest made once per signature."""
    block_d = padded_head_dim(head_dim, dtype)
    name = DTYPE_NAMES[dtype]
    split = launch_config("decode_split", block_d, name, target)
    filled = split
    if paged:
        filled = launch_config("decode_split", block_d, name, target, variants=FILLED_PAGED_VARIANT)
    merge = launch_config("decode_merge", block_d, name, target)
    return _plan(dtype, head_dim, block_d, slices, rows, capacity, requested, dequantize, split, filled, merge,
                 device, launches_on_device())


def _split_kwargs(config: LaunchConfig, block_d: int, dtype: torch.dtype, rows: int, dequantize: bool) -> dict:
    """The split kernel's launch keyword arguments under `config` for `rows` rows a slice."""
    split = config_kwargs(config, block_d, dtype)
    if dequantize:
        # Head slices are multiplied as stored; an fp8 cache is dequantised on whole tiles.
        split.pop("HEAD_CHUNK", None)
    split["BLOCK_M"] = row_tile(rows, split["BLOCK_M"])
    return split


@lru_cache(maxsize=PLANS_KEPT)
def _plan(dtype: torch.dtype, head_dim: int, block_d: int, slices: int, rows: int, capacity: int, requested: int,
          dequantize: bool, split_config: LaunchConfig, filled_config: LaunchConfig, merge_config: LaunchConfig,
          device: torch.device, on_device: bool) -> LaunchPlan:
    """launch_plan's plan: a pure function of its arguments, hence cached.  The split count is
    worked out under the general table's tiles; a call left with one split whose programs fill
    every processor FILLED_PROGRAMS_PER_PROCESSOR times then launches with `filled_config`
    (FILLED_PAGED_VARIANT's table, or the general one again where the cache is contiguous)."""
    split = _split_kwargs(split_config, block_d, dtype, rows, dequantize)
    programs = slices * ceil_div(rows, split["BLOCK_M"])
    available = processors(device, on_device)
    splits = split_count(requested, programs, capacity, split["BLOCK_N"], available)
    if splits == 1 and programs >= FILLED_PROGRAMS_PER_PROCESSOR * available:
        split_config = filled_config
        split = _split_kwargs(split_config, block_d, dtype, rows, dequantize)
    row_tiles = ceil_div(rows, split["BLOCK_M"])
    merge = config_kwargs(merge_config, block_d, dtype, tiles=("BLOCK_M",))
    merge["BLOCK_M"] = min(merge["BLOCK_M"], next_power_of_2(rows))  # no tl.dot: no 16-row floor
    merge.update(merge_tiles(splits, merge["BLOCK_M"], block_d))
    # Recorded as the launches take them: these kernels stream no tensor descriptors.
    return LaunchPlan(block_d, splits, split, merge,
                      replace(split_config, descriptors=False), replace(merge_config, descriptors=False),
                      row_tiles * splits, ceil_div(rows, merge["BLOCK_M"]) * merge["DIM_CHUNKS"],
                      head_dim_bound(head_dim, block_d, split), head_dim_bound(head_dim, block_d),
                      (slices * splits, rows, head_dim))
