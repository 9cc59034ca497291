"""Launching the bundled kernels: tile shapes from their launch tables
(kernels.tuning), and grids that respect CUDA's limits.

Every kernel runs one program per (sequence block, batch x head slice): grid axis 0
walks the blocks of one slice, axis 1 the slices, so programs that share K/V (or Q)
run next to each other and hit the same L2 lines.  CUDA caps grid axes 1 and 2 at
65,535, so B*H (or B*Hkv) beyond that is covered by several launches, each told
where its slices start (`first_batch_head`, read by blocks.program_coordinates).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from . import replay
from .targets import current_target
from .tuning import launch_config, record_launch
from .validation import DTYPE_NAMES, FP8

# CUDA's limit on gridDim.y.  A module constant so tests can lower it and prove the
# split on the interpreter without launching 65,536 slices.
MAX_GRID_BATCH_HEADS = 65535


# Host-side integer arithmetic for grids and tiles.  triton.cdiv and triton.next_power_of_2
# are ConstexprFunctions (triton 3.9): a call from Python goes through their constexpr
# unwrapping, ~5 us each, which a decode step's host time feels.  Kernels keep tl.cdiv.
def ceil_div(numerator: int, denominator: int) -> int:
    """ceil(numerator / denominator) of ints (denominator > 0): triton.cdiv on the host."""
    return -(-numerator // denominator)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): triton.next_power_of_2 on the host
    (which gives 0 for 0)."""
    return 1 << max(n - 1, 0).bit_length()


def padded_head_dim(head_dim: int, dtype: torch.dtype) -> int:
    """BLOCK_D: tl.arange and tl.dot need a power of two >= 16 (>= 32 for 8-bit
    operands: fp8 MMA instructions consume K in steps of 32, and Triton refuses a
    16-wide fp8 dot); padding lanes are masked on load and store and are 0 in every
    product, so 96, 192 and padded fp8 dims are exact."""
    smallest = 32 if dtype in FP8 else 16
    return max(smallest, next_power_of_2(head_dim))


def head_dim_bound(head_dim: int, block_d: int, launch: dict | None = None) -> int | None:
    """The head-dim bound a kernel masks its tiles' columns with: None where the head dim
    fills BLOCK_D (64, 128, ...), so the kernel is compiled without the column masks
    (blocks.below); the head dim itself where BLOCK_D pads it (96, 192, fp8 d16), and
    always for a `launch` (launch_kwargs' result) that slices the head dim: its slice loop
    runs to it, a trip count the compiler cannot see (kernels.head_slices says why)."""
    sliced = launch is not None and "HEAD_CHUNK" in launch
    return None if head_dim == block_d and not sliced else head_dim


def launch_kwargs(kernel: str, block_d: int, dtype: torch.dtype, tiles=("BLOCK_M", "BLOCK_N"),
                  variants: str | tuple[str, ...] = (), band_keys: int | None = None,
                  streamed: tuple[torch.Tensor, ...] | None = None) -> dict:
    """The tile sizes named in `tiles` (those the kernel takes), num_warps, num_stages
    and the backend's knobs (e.g. waves_per_eu) of `kernel` on the current target;
    `variants` (e.g. "dropout") pick a variant's table where the target has one, and
    `band_keys` (a window's keys a row) whether a narrow band's table applies
    (kernels.tuning.launch_config).
    A kernel that can stream tiles through tensor descriptors names the tensors it
    streams (`streamed`) and gets DESCRIPTORS: its table's choice, where they allow it.
    HEAD_CHUNK is passed where the table slices the head dim (only the kernels whose
    tables set it take it)."""
    cfg = launch_config(kernel, block_d, DTYPE_NAMES[dtype], variants=variants, band_keys=band_keys)
    kwargs = config_kwargs(cfg, block_d, dtype, tiles)
    if streamed is not None:
        kwargs["DESCRIPTORS"] = cfg.descriptors and descriptors_allowed(streamed)
        if kwargs["DESCRIPTORS"] and launches_on_device() and not current_target().interpreted:
            ensure_scratch_allocator()
    record_launch(kernel, replace(cfg, descriptors=kwargs.get("DESCRIPTORS", False)))
    return kwargs


def config_kwargs(cfg, block_d: int, dtype: torch.dtype, tiles=("BLOCK_M", "BLOCK_N")) -> dict:
    """What a launch with configuration `cfg` passes, but DESCRIPTORS: the tile sizes named
    in `tiles`, num_warps, num_stages, the backend's knobs, and HEAD_CHUNK where `cfg`
    slices the head dim (launch_kwargs without the table look-up and its record)."""
    sizes = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}
    kwargs = {**{name: sizes[name] for name in tiles}, **cfg.options()}
    head_chunk = sliced_head(cfg, block_d, dtype)
    if head_chunk:
        kwargs["HEAD_CHUNK"] = head_chunk  # kernels.head_slices
    return kwargs


def sliced_head(cfg, block_d: int, dtype: torch.dtype) -> int | None:
    """The HEAD_CHUNK a launch passes: the config's head_chunk, at least an 8-bit dot's
    K of 32 (padded_head_dim's rule), where that is below BLOCK_D; else None (whole tiles)."""
    if cfg.head_chunk is None:
        return None
    chunk = max(cfg.head_chunk, padded_head_dim(1, dtype))
    return chunk if chunk < block_d else None


def descriptors_allowed(tensors: tuple[torch.Tensor, ...]) -> bool:
    """Whether tensor descriptors can describe every (batch, head) slice of `tensors` on
    the current target: unit head-dim stride, and every other stride and the start
    16-byte aligned (TMA's rules for a global tensor)."""
    if not current_target().tensor_descriptors:
        return False
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(stride * t.element_size() % 16 == 0 for stride in t.stride()[:-1])
               for t in tensors)


def _descriptor_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def ensure_scratch_allocator() -> None:
    """Device-side tensor descriptors live in global scratch memory that triton asks an
    allocator for.  Give it torch's, unless the caller set one: checked at every launch,
    since triton keeps the allocator per thread context (autograd's backward thread
    starts without one)."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(_descriptor_scratch)


def _on_device(kernel, grid: tuple, *args, **kwargs) -> None:
    replay.launch(kernel, grid, args, kwargs)  # kernel[grid](*args, **kwargs), without the JIT's dispatch


# What `launch` does with each (kernel, grid, arguments): run it on the device, or,
# under the compile-only tier (conformance/compile_only), compile it for a target.
_launcher = _on_device


def set_launcher(launcher=None):
    """Route every launch to `launcher(kernel, grid, *args, **kwargs)` (None: the device);
    returns the previous launcher."""
    global _launcher
    previous, _launcher = _launcher, launcher or _on_device
    return previous


def launches_on_device() -> bool:
    """False while launches are routed elsewhere (compiled for a target that is not here,
    with CPU tensors standing in)."""
    return _launcher is _on_device


def launch(kernel, blocks: int, batch_heads: int, *args, **kwargs) -> None:
    """kernel[(blocks, n)](*args, first_batch_head=..., **kwargs), in as many launches
    of n <= MAX_GRID_BATCH_HEADS slices as it takes to cover `batch_heads`."""
    if 0 < batch_heads <= MAX_GRID_BATCH_HEADS:  # one launch, the usual case, without the loop
        _launcher(kernel, (blocks, batch_heads), *args, first_batch_head=0, **kwargs)
        return
    for first in range(0, batch_heads, MAX_GRID_BATCH_HEADS):
        count = min(MAX_GRID_BATCH_HEADS, batch_heads - first)
        _launcher(kernel, (blocks, count), *args, first_batch_head=first, **kwargs)
