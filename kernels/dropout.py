"""Attention dropout: its parameters as the kernels take them, and the keep mask
materialised for tests and for the reference paths to replay.

The mask is a pure function of (seed, batch x head, query row, key col) and of p
(see dropout_keep below); it does not depend on the shapes, the causal mask or
any tiling, so `dropout_keep_mask` can produce any chunk of it that the chunked
reference asks for, bit for bit what the forward and backward kernels used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .launch import ceil_div, launch
from .validation import check_dropout_p, check_dropout_seed

_THRESHOLD_BITS = 31  # dropout_keep compares the top 31 random bits
_MASK_BLOCK = 64  # materialiser tile: rows x keys (test-only, never tuned)


@triton.jit
def dropout_keep(seed_lo, seed_hi, threshold, batch_head, rows, col_start, BLOCK_N: tl.constexpr):
    """Dropout keep mask of the tile (rows, col_start + [0, BLOCK_N)) of one batch x head
    slice; col_start must be a multiple of 4.

    A pure function of (seed, batch_head, query row, key col), so the forward, both
    backward kernels and the mask materialiser agree bit for bit whatever their tiling.
    Philox-4x32-10 is keyed by the 64-bit seed and counts (key // 4, row, batch_head, 0)
    in four separate 32-bit words; its four output words serve keys 4q .. 4q+3, so one
    call covers four weights (a quarter of the integer work and of the register
    pressure of one call per weight).  Collision-free for any B*H, Sq, Sk < 2^32, where
    one flat int64 offset would not be portable: tl.rand/tl.randint feed int64 offsets
    to 64-bit Philox in triton 3.2 but split them into two 32-bit words in 3.9, another
    stream.  philox_impl has the same 32-bit path in 3.2 ... 3.9.

    Kept iff the top 31 bits of the word >= threshold = floor(p * 2^31): an integer
    comparison, so no float conversion can differ between versions or backends.
    """
    tl.static_assert(BLOCK_N % 4 == 0, "dropout_keep: BLOCK_N must be a multiple of 4")
    quads = col_start // 4 + tl.arange(0, BLOCK_N // 4)
    zero = tl.zeros((rows.shape[0], BLOCK_N // 4), dtype=tl.uint32)
    w0, w1, w2, w3 = tl.philox_impl(zero + quads[None, :].to(tl.uint32),
                                    zero + rows[:, None].to(tl.uint32),
                                    zero + batch_head.to(tl.uint32), zero,
                                    seed_lo.to(tl.uint32, bitcast=True),
                                    seed_hi.to(tl.uint32, bitcast=True))
    # join adds a new minor dimension: join(join(w0, w2), join(w1, w3))[r, q, a, b] is
    # word 2a + b, which row-major reshaping puts at key 4q + 2a + b.
    bits = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), (rows.shape[0], BLOCK_N))
    return (bits >> 1) >= threshold


@triton.jit
def dropped_value_gradient(dp, keep, keep_scale):
    """dP of the un-dropped weights: dropped pairs get none, kept ones the 1/(1-p) rescale."""
    return tl.where(keep, dp * keep_scale, 0.0)


def _as_int32(word: int) -> int:
    """An unsigned 32-bit word as the signed int32 kernel argument with the same bits."""
    return word - 2**32 if word >= 2**31 else word


@dataclass(frozen=True)
class DropoutParams:
    """p and the 64-bit seed of one call (a seed outside [0, 2^64) is taken mod 2^64)."""

    p: float
    seed: int

    @property
    def keep_scale(self) -> float:
        """1 / (1 - p), the rescale of kept weights (passed to the kernels as fp32)."""
        return 1.0 / (1.0 - self.p)

    def kernel_args(self) -> tuple:
        """(seed_lo, seed_hi, drop_threshold, keep_scale) as the kernels take them."""
        seed = self.seed % 2**64
        # p * 2^31 is exact (a power-of-two scaling) and < 2^31 for p < 1.  The drop
        # rate is floor(p * 2^31) / 2^31, within 2^-31 of p; the rescale uses p itself.
        threshold = int(self.p * 2**_THRESHOLD_BITS)
        return (_as_int32(seed & 0xFFFFFFFF), _as_int32(seed >> 32), threshold, self.keep_scale)


def dropout_params(p, seed) -> DropoutParams | None:
    """Validated parameters, or None when p == 0 (no dropout, and no seed drawn).

    seed None draws one from torch's default CPU generator, so torch.manual_seed makes
    runs reproducible."""
    p = check_dropout_p(p)
    seed = check_dropout_seed(seed)
    if p == 0.0:
        return None
    if seed is None:
        seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64).item())
    return DropoutParams(p, seed)


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "drop_threshold", "batch_head_start", "row_start",
                               "key_start", "n_rows", "n_keys", "first_batch_head"])
def dropout_mask_kernel(
    MASK, stride_mb, stride_mm, stride_mn,
    seed_lo, seed_hi, drop_threshold,
    batch_head_start, row_start, key_start, n_rows, n_keys,
    first_batch_head,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """MASK[h, i, j] = keep(batch_head_start + h, row_start + i, key_start + j).

    Axis 0 walks the (row block, key block) tiles of one slice, axis 1 the slices.  Key
    tiles start on the global multiple-of-4 grid that dropout_keep needs, so the first
    one may begin up to 3 keys before key_start (those are not stored)."""
    key_base = key_start - key_start % 4
    tiles_n = tl.cdiv(key_start + n_keys - key_base, BLOCK_N)
    local_rows = (tl.program_id(0) // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    tile_start = key_base + (tl.program_id(0) % tiles_n) * BLOCK_N
    local_cols = tile_start - key_start + tl.arange(0, BLOCK_N)
    local_head = first_batch_head + tl.program_id(1)
    keep = dropout_keep(seed_lo, seed_hi, drop_threshold, batch_head_start + local_head,
                        row_start + local_rows, tile_start, BLOCK_N)
    ptrs = (MASK + local_head.to(tl.int64) * stride_mb
            + local_rows[:, None] * stride_mm + local_cols[None, :] * stride_mn)
    in_range = ((local_rows[:, None] < n_rows) & (local_cols[None, :] >= 0)
                & (local_cols[None, :] < n_keys))
    tl.store(ptrs, keep.to(tl.int8), mask=in_range)


def _span(value, total: int, name: str) -> tuple[int, int]:
    start, stop = (0, total) if value is None else (int(value[0]), int(value[1]))
    if not 0 <= start <= stop <= total:
        raise ValueError(f"{name}: expected a (start, stop) range within [0, {total}], got {value!r}")
    return start, stop


def dropout_keep_mask(seed: int, p: float, batch: int, heads: int, seq_q: int, seq_k: int, *,
                      device, batch_heads=None, rows=None, keys=None) -> torch.Tensor:
    """The keep mask flash_attention(..., dropout_p=p, dropout_seed=seed) uses, for tests
    and for reference replay: a bool tensor (n_batch_heads, n_rows, n_keys), True where
    the attention weight P[b, h, i, j] is kept (and rescaled by 1/(1-p)).

    batch_heads, rows, keys: optional (start, stop) ranges of the flattened b*heads + h
    index, the query rows and the keys (default: all); a chunked reference asks for its
    chunk only and never holds the whole B*H x Sq x Sk mask.  Launches a small Triton
    kernel on `device` (the kernels' device) built from the same block as the kernels.
    """
    if check_dropout_seed(seed) is None:
        raise TypeError("dropout_seed: expected an int, got None "
                        "(the mask of a drawn seed cannot be replayed)")
    params = DropoutParams(check_dropout_p(p), seed)
    bh0, bh1 = _span(batch_heads, batch * heads, "batch_heads")
    r0, r1 = _span(rows, seq_q, "rows")
    k0, k1 = _span(keys, seq_k, "keys")
    mask = torch.empty((bh1 - bh0, r1 - r0, k1 - k0), dtype=torch.int8, device=device)
    if mask.numel() == 0:
        return mask.view(torch.bool)
    seed_lo, seed_hi, threshold, _ = params.kernel_args()
    tiles = ceil_div(r1 - r0, _MASK_BLOCK) * ceil_div(k1 - k0 + k0 % 4, _MASK_BLOCK)
    launch(dropout_mask_kernel, tiles, bh1 - bh0, mask, *mask.stride(),
           seed_lo, seed_hi, threshold, bh0, r0, k0, r1 - r0, k1 - k0,
           BLOCK_M=_MASK_BLOCK, BLOCK_N=_MASK_BLOCK)
    return mask.view(torch.bool)
