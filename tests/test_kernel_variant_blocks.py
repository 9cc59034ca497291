"""The variants' building blocks on their own, on the interpreter: the window's tile bounds
(kernels.bands) against a brute-force look at every (query, key) pair, and the fp32 tanh
of the softcap (kernels.scores) against float64."""

import itertools

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled.kernels.bands import window_key_tiles, window_query_tiles  # noqa: E402
from conformance.bundled.kernels.problem import resolve_window  # noqa: E402
from conformance.bundled.kernels.scores import tanh_and_slope  # noqa: E402
from test_kernel_variants import visibility  # noqa: E402


@triton.jit
def tile_bounds_kernel(OUT, seq_q, seq_k, window_left, window_right,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, KEYS: tl.constexpr):
    """OUT[t] = (first, unmasked_start, unmasked_end, end) of query tile t (KEYS: the key
    bounds a forward or dQ program takes) or key tile t (the dK/dV's query bounds)."""
    tile = tl.program_id(0)
    if KEYS:
        first, unmasked_start, unmasked_end, end = window_key_tiles(
            tile * BLOCK_M, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
    else:
        first, unmasked_start, unmasked_end, end = window_query_tiles(
            tile * BLOCK_N, seq_q, seq_k, window_left, window_right, BLOCK_M, BLOCK_N)
    tl.store(OUT + tile * 4 + tl.arange(0, 4),
             tl.where(tl.arange(0, 4) == 0, first, tl.where(tl.arange(0, 4) == 1, unmasked_start,
                      tl.where(tl.arange(0, 4) == 2, unmasked_end, end))))


def tile_bounds(seq_q, seq_k, band, block_m, block_n, keys):
    tiles = triton.cdiv(seq_q if keys else seq_k, block_m if keys else block_n)
    out = torch.full((tiles, 4), -99, dtype=torch.int32)
    tile_bounds_kernel[(tiles,)](out, seq_q, seq_k, *band, BLOCK_M=block_m, BLOCK_N=block_n, KEYS=keys)
    return out.tolist()


def check_bounds(bounds, seen, whole_tiles, tile, other_tile, n_other):
    """One tile's (first, unmasked_start, unmasked_end, end) along the other axis: the span
    covers every pair seen, and no more tile than that; the unmasked span is exactly the
    tiles whose every pair is seen; spans in order, starts on the tile grid."""
    first, unmasked_start, unmasked_end, end = bounds
    assert first <= unmasked_start <= unmasked_end <= end, bounds
    assert first % other_tile == 0 and all(x % other_tile == 0 or x == end for x in (unmasked_start, unmasked_end))
    if not seen.any():
        assert end == first, (tile, bounds)
        return
    positions = seen.nonzero().flatten()
    assert first == positions[0] // other_tile * other_tile and end == positions[-1] + 1, (tile, bounds)
    expected_whole = [start for start in range(0, n_other, other_tile) if whole_tiles(start)]
    assert list(range(unmasked_start, unmasked_end, other_tile)) == expected_whole, (tile, bounds)


SIZES = [1, 17, 64, 70, 130]
WINDOWS = [((0, 0), False), ((5, 3), False), ((20, -1), True), ((-1, 20), False), ((100, 2), False), ((37, 40), False)]
TILES = [(16, 16), (32, 16), (16, 64)]


@pytest.mark.parametrize("block_m, block_n", TILES)
def test_window_tile_bounds_cover_the_band_and_nothing_else(block_m, block_n):
    for (seq_q, seq_k), (window, causal) in itertools.product(itertools.product(SIZES, SIZES[1:]), WINDOWS):
        causal_flag, band = resolve_window(window, causal, seq_q, seq_k)
        assert band is not None and not causal_flag
        mask = visibility(seq_q, seq_k, causal, window)
        for tile, bounds in enumerate(tile_bounds(seq_q, seq_k, band, block_m, block_n, keys=True)):
            rows = mask[tile * block_m:(tile + 1) * block_m]  # the tile's real rows
            check_bounds(bounds, rows.any(0), lambda start: start + block_n <= seq_k and bool(
                rows[:, start:start + block_n].all()), tile, block_n, seq_k)
        for tile, bounds in enumerate(tile_bounds(seq_q, seq_k, band, block_m, block_n, keys=False)):
            cols = mask[:, tile * block_n:(tile + 1) * block_n]
            full_key_tile = (tile + 1) * block_n <= seq_k
            check_bounds(bounds, cols.any(1), lambda start: full_key_tile and start + block_m <= seq_q and bool(
                cols[start:start + block_m].all()), tile, block_m, seq_q)


@triton.jit
def tanh_kernel(X, T, SLOPE, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offsets, mask=offsets < n)
    tanh, slope = tanh_and_slope(x)
    tl.store(T + offsets, tanh, mask=offsets < n)
    tl.store(SLOPE + offsets, slope, mask=offsets < n)


def test_softcap_tanh_is_within_two_ulps_and_its_slope_accurate():
    near = torch.linspace(-0.6, 0.6, 40_001)
    far = torch.linspace(-50.0, 50.0, 40_001)
    tiny = torch.logspace(-30, -1, 301)
    x = torch.cat([near, far, tiny, -tiny, torch.tensor([0.0, -0.0, 0.55, -0.55, float("inf"), -float("inf")])])
    t, slope = torch.empty_like(x), torch.empty_like(x)
    tanh_kernel[(triton.cdiv(x.numel(), 1024),)](x, t, slope, x.numel(), BLOCK=1024)
    exact = torch.tanh(x.double())
    ulp = torch.from_numpy(np.spacing(exact.float().abs().numpy())).double()
    assert ((t.double() - exact).abs() / ulp).max().item() <= 2.0
    assert torch.equal(torch.signbit(t), torch.signbit(exact))  # the sign bit is put back bitwise: -0 stays -0
    exact_slope = 1 / torch.cosh(x.double()) ** 2
    normal = exact_slope > 1e-30  # below that, exp(-2|x|) leaves fp32's normal range
    assert ((slope.double() - exact_slope).abs() / exact_slope)[normal].max().item() < 1e-5
    assert (slope[~normal].abs() <= 1e-30).all()
    nan = torch.tensor([float("nan")] * 4)
    tanh_kernel[(1,)](nan, t, slope, 4, BLOCK=1024)
    assert t[:4].isnan().all() and slope[:4].isnan().all()
