"""What the primitive probes measure: each function launches one probe kernel
(`conformance/probing/probe_kernels.py`) on a device and compares with torch, returning a
`Measurement` (max error and tolerance in the probe's unit, and what was compared).

Tolerances, and why (u = 2^-24, fp32's unit roundoff):

* tl.dot: exact products (fp16, bf16, fp8 operands are exact in fp32) accumulated in
  fp32 err at most (K+1)·u·Σ|a||b| (Higham); allowed twice that, as tensor cores may
  align and add with truncation (Fasi et al. 2021). tf32 adds 2^-10 per operand.
* exp2: 4 ulp (hardware exp2 is approximate; CUDA documents 2 ulp for exp2f).
* row max, casts, Philox, atomics on integers: exact.
* row sum: (n-1)·u·Σ|x|, any summation order.
* tl.rand: deterministic per seed, in [0, 1), each of 64 bins within 6 sigma of N/64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from conformance.cases.inputs import TORCH_DTYPES
from conformance.judging.determinism import INT_OF_SIZE, bits
from conformance.judging.rule import max_abs_error
from conformance.bundled.reference.philox import philox4x32_10

FP32_UNIT_ROUNDOFF = 2.0**-24
TF32_UNIT_ROUNDOFF = 2.0**-11  # 10 stored significand bits


@dataclass(frozen=True)
class Measurement:
    """What a probe measured: its max error (in the probe's unit) and the tolerance."""

    max_error: float
    tolerance: float
    detail: str  # what was compared, for the reason of a failure

    @property
    def passed(self) -> bool:
        return self.max_error <= self.tolerance  # False for NaN


# --- helpers ------------------------------------------------------------------------

def _normal(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _ordered_bits(values: torch.Tensor) -> torch.Tensor:
    """Float bit patterns as int64 ordered like the floats: a difference counts ulps."""
    width = 8 * values.element_size()
    signed = bits(values.cpu()).to(torch.int64)
    magnitude = signed & ((1 << (width - 1)) - 1)
    return torch.where(signed < 0, -magnitude, magnitude)


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest distance in units in the last place between two tensors of one float dtype
    (0 iff bit-identical up to the sign of zero)."""
    if actual.numel() == 0:
        return 0.0
    return float((_ordered_bits(actual) - _ordered_bits(expected)).abs().max().item())


# --- measurements ---------------------------------------------------------------------

DOT_SHAPE = (64, 64, 64)  # M, N, K: the smallest tile every backend's tl.dot takes for every dtype


def dot(dtype: str, input_precision: str = "default", operand_rounding: float = 0.0):
    """tl.dot of random operands of `dtype` against the float64 product of the same operands."""
    def measure(device: str) -> Measurement:
        from conformance.probing import probe_kernels

        m, n, k = DOT_SHAPE
        torch_dtype = TORCH_DTYPES["fp32" if dtype == "tf32" else dtype]
        a, b = (x.to(torch_dtype).to(device) for x in (_normal((m, k), 1), _normal((k, n), 2)))
        c = torch.empty((m, n), dtype=torch.float32, device=device)
        probe_kernels.dot_kernel[(1,)](a, b, c, m, n, k, input_precision)
        a64, b64 = a.cpu().double(), b.cpu().double()
        # Accumulating K products in fp32 errs at most ~(K+1)·u·Σ|a||b| (Higham); twice
        # that, as tensor cores may align and add with truncation (Fasi et al. 2021).
        magnitude = (a64.abs() @ b64.abs()).max().item()
        bound = (2 * operand_rounding + 2 * (k + 1) * FP32_UNIT_ROUNDOFF) * magnitude
        return Measurement(max_abs_error(c.cpu(), a64 @ b64), bound, f"a {m}x{n}x{k} product")
    return measure


def _map(op: str, inputs: torch.Tensor, out_dtype: torch.dtype, expected: torch.Tensor, tolerance: float,
         what: str) -> Callable[[str], Measurement]:
    def measure(device: str) -> Measurement:
        from conformance.probing import probe_kernels

        x = inputs.to(device)
        y = torch.empty(x.shape, dtype=out_dtype, device=device)
        block = 4096
        probe_kernels.map_kernel[(_blocks(x.numel(), block),)](x, y, x.numel(), op, block)
        differs = _ordered_bits(y) != _ordered_bits(expected)
        detail = f"{what}: {int(differs.sum())} of {x.numel()} values differ from torch"
        if differs.any():
            first = int(differs.nonzero()[0, 0])
            detail += (f", e.g. {inputs[first].item():.9g} -> {y[first].item():.9g} "
                       f"(torch {expected[first].item():.9g})")
        return Measurement(ulp_distance(y, expected), tolerance, detail)
    return measure


def _blocks(count: int, block: int) -> int:
    return -(-count // block)


def _exp2_inputs() -> torch.Tensor:
    """fp32 x over the normal output range, plus inputs whose result underflows to 0
    (the kernels exponentiate -inf for masked scores)."""
    x = torch.linspace(-125.0, 126.0, 4000) + torch.rand(4000, generator=torch.Generator().manual_seed(3))
    return torch.cat([x, torch.tensor([0.0, -0.0, -200.0, -1e30, -math.inf])]).float()


def exp2(device: str) -> Measurement:
    x = _exp2_inputs()
    return _map("exp2", x, torch.float32, torch.exp2(x.double()).float(), 4.0, "exp2")(device)


def _narrowing_inputs(dtype: torch.dtype) -> torch.Tensor:
    """fp32 values across the target's range (subnormal to overflow, both signs) plus
    exact ties between two neighbours of `dtype` (ties go to the even one)."""
    generator = torch.Generator().manual_seed(4)
    exponents = torch.randint(-30, 18, (4096,), generator=generator).float()
    significands = 1 + torch.rand(4096, generator=generator)
    spread = torch.randn(4096, generator=generator).sign() * significands * exponents.exp2()
    grid = torch.randn(2048, generator=generator).to(dtype).float()
    spare_bits = 23 + round(math.log2(torch.finfo(dtype).eps))  # fp32 significand bits the target drops
    ties = (grid.view(torch.int32) + (1 << (spare_bits - 1))).view(torch.float32)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, 1e30, -1e30])
    return torch.cat([spread, grid, ties, specials])


def cast(dtype: str) -> Callable[[str], Measurement]:
    def measure(device: str) -> Measurement:
        torch_dtype = TORCH_DTYPES[dtype]
        x = _narrowing_inputs(torch_dtype)
        return _map("cast", x, torch_dtype, x.to(torch_dtype), 0.0, f"fp32 -> {dtype}")(device)
    return measure


def _all_finite_values(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of a 8- or 16-bit float dtype (each bit pattern once)."""
    size = torch.empty((), dtype=dtype).element_size()
    width = 8 * size
    patterns = torch.arange(-(2 ** (width - 1)), 2 ** (width - 1), dtype=torch.int64).to(INT_OF_SIZE[size])
    values = patterns.view(dtype)
    return values[torch.isfinite(values.float())]


def upcast(dtype: str) -> Callable[[str], Measurement]:
    def measure(device: str) -> Measurement:
        x = _all_finite_values(TORCH_DTYPES[dtype])
        return _map("cast", x, torch.float32, x.float(), 0.0, f"{dtype} -> fp32, every finite value")(device)
    return measure


REDUCE_SHAPE = (16, 64)  # rows x reduced length, one tile


def _reduction_inputs(with_minus_inf: bool) -> torch.Tensor:
    """Mixed magnitudes (2^-20 ... 2^20); optionally -inf entries and one all -inf row, which
    the online softmax meets as fully masked score rows."""
    generator = torch.Generator().manual_seed(5)
    scales = torch.randint(-20, 21, REDUCE_SHAPE, generator=generator).float().exp2()
    x = torch.randn(REDUCE_SHAPE, generator=generator) * scales
    if with_minus_inf:
        x[torch.rand(REDUCE_SHAPE, generator=generator) < 0.25] = -math.inf
        x[0] = -math.inf
    return x


def reduction(op: str) -> Callable[[str], Measurement]:
    def measure(device: str) -> Measurement:
        from conformance.probing import probe_kernels

        x = _reduction_inputs(with_minus_inf=op == "max")
        y = torch.empty(REDUCE_SHAPE[0], dtype=torch.float32, device=device)
        probe_kernels.row_reduce_kernel[(1,)](x.to(device), y, *REDUCE_SHAPE, op)
        what = f"{REDUCE_SHAPE[0]} rows of {REDUCE_SHAPE[1]}"
        if op == "max":  # exact by definition, -inf rows included
            return Measurement(ulp_distance(y.cpu(), x.amax(1)), 0.0, what)
        # Any order of n - 1 fp32 additions errs at most (n - 1)·u·Σ|x| (Higham).
        bound = (REDUCE_SHAPE[1] - 1) * FP32_UNIT_ROUNDOFF * x.double().abs().sum(1).max().item()
        return Measurement(max_abs_error(y.cpu(), x.double().sum(1)), bound, what)
    return measure


RAND_COUNT, RAND_BINS, RAND_SIGMAS, RAND_BLOCK = 2**14, 64, 6.0, 4096


def rand(device: str) -> Measurement:
    """tl.rand: the same seed gives the same numbers, another seed others, all in [0, 1),
    and 64 equal bins hold N/64 each within 6 sigma."""
    from conformance.probing import probe_kernels

    def draw(seed: int) -> torch.Tensor:
        y = torch.empty(RAND_COUNT, dtype=torch.float32, device=device)
        probe_kernels.rand_kernel[(RAND_COUNT // RAND_BLOCK,)](y, seed, RAND_BLOCK)
        return y.cpu()

    first, again, other = draw(1234), draw(1234), draw(4321)
    problems = [text for text, bad in (
        ("the same seed gave different numbers", not torch.equal(first, again)),
        ("two seeds gave the same numbers", (first == other).float().mean().item() > 0.01),
        ("values outside [0, 1)", not ((first >= 0) & (first < 1)).all().item()))
        if bad]
    if problems:
        return Measurement(math.inf, RAND_SIGMAS, "; ".join(problems))
    counts = torch.histc(first, bins=RAND_BINS, min=0.0, max=1.0).double()
    expected = RAND_COUNT / RAND_BINS
    sigma = math.sqrt(RAND_COUNT * (1 / RAND_BINS) * (1 - 1 / RAND_BINS))
    deviation = ((counts - expected).abs() / sigma).max().item()
    return Measurement(deviation, RAND_SIGMAS, f"{RAND_COUNT} draws in {RAND_BINS} bins, worst bin off by")


PHILOX_COUNT = 4096
PHILOX_KEY = (0x9E3779B9, 0xFFFFFFFF)


def philox(device: str) -> Measurement:
    from conformance.probing import probe_kernels

    generator = torch.Generator().manual_seed(6)
    counters = torch.randint(-2**31, 2**31, (4, PHILOX_COUNT), dtype=torch.int64, generator=generator)
    counters[:, 0], counters[:, 1] = 0, -1  # the all-zero and all-ones counters
    counters = counters.to(torch.int32)
    words = torch.empty_like(counters, device=device)
    signed_key = [word - 2**32 if word >= 2**31 else word for word in PHILOX_KEY]
    probe_kernels.philox_kernel[(_blocks(PHILOX_COUNT, 1024),)](counters.to(device), words, *signed_key,
                                                                    PHILOX_COUNT, 1024)
    expected = np.stack(philox4x32_10(counters.numpy().view(np.uint32), PHILOX_KEY)).astype(np.uint32)
    wrong = int((words.cpu().numpy().view(np.uint32) != expected).sum())
    return Measurement(float(wrong), 0.0, f"{wrong} of {4 * PHILOX_COUNT} Philox-4x32-10 words differ")


ATOMIC_PROGRAMS, ATOMIC_BLOCK = 64, 128


def atomic_add(device: str) -> Measurement:
    """64 programs add integer-valued fp32 blocks into the same 128 cells and 1 into a
    counter: every partial sum is an integer below 2^24, so any order is exact."""
    from conformance.probing import probe_kernels

    generator = torch.Generator().manual_seed(7)
    x = torch.randint(-1000, 1001, (ATOMIC_PROGRAMS, ATOMIC_BLOCK), generator=generator).float()
    total = torch.zeros(ATOMIC_BLOCK, dtype=torch.float32, device=device)
    count = torch.zeros(1, dtype=torch.int32, device=device)
    probe_kernels.atomic_add_kernel[(ATOMIC_PROGRAMS,)](x.to(device), total, count, ATOMIC_BLOCK)
    error = max_abs_error(total.cpu(), x.sum(0)) + abs(int(count.item()) - ATOMIC_PROGRAMS)
    what = f"{ATOMIC_PROGRAMS} programs into {ATOMIC_BLOCK} cells (counter {int(count.item())})"
    return Measurement(error, 0.0, what)
