"""Tiny Triton kernels that exercise one primitive each, raw: no workaround of any
backend's quirk (unlike kernels/blocks.py), so a faulty primitive shows.

Import only after `backends.activate()` (the interpreter needs TRITON_INTERPRET=1
before any @triton.jit function is defined). `conformance/probing/probes.py` launches them
and compares with torch.
"""

import triton
import triton.language as tl


@triton.jit
def dot_kernel(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """C = A @ B, one [M, K] x [K, N] product accumulated into fp32 (row-major, contiguous).
    INPUT_PRECISION "default" calls tl.dot without it (as the kernels do for 16-bit inputs)."""
    rows, cols, inner = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + rows[:, None] * K + inner[None, :])
    b = tl.load(B + inner[:, None] * N + cols[None, :])
    acc = tl.zeros((M, N), dtype=tl.float32)
    if INPUT_PRECISION == "default":
        acc = tl.dot(a, b, acc)
    else:
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    tl.store(C + rows[:, None] * N + cols[None, :], acc)


@triton.jit
def map_kernel(X, Y, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """Y = op(X) elementwise: OP "exp2" (tl.math.exp2) or "cast" (.to(Y's dtype), the
    default round-to-nearest-even for narrowing float casts)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offsets < n
    x = tl.load(X + offsets, mask=in_range)
    if OP == "exp2":
        y = tl.math.exp2(x)
    else:
        y = x.to(Y.dtype.element_ty)
    tl.store(Y + offsets, y, mask=in_range)


@triton.jit
def row_reduce_kernel(X, Y, M: tl.constexpr, N: tl.constexpr, OP: tl.constexpr):
    """Y = the row maxima (OP "max", tl.max) or row sums (OP "sum", tl.sum) of one
    [M, N] fp32 tile."""
    rows, cols = tl.arange(0, M), tl.arange(0, N)
    x = tl.load(X + rows[:, None] * N + cols[None, :])
    if OP == "max":
        y = tl.max(x, 1)
    else:
        y = tl.sum(x, 1)
    tl.store(Y + rows, y)


@triton.jit
def rand_kernel(Y, seed, BLOCK: tl.constexpr):
    """Y[i] = tl.rand(seed, i): uniform fp32 in [0, 1) from Philox."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offsets, tl.rand(seed, offsets))


@triton.jit(do_not_specialize=["key_lo", "key_hi"])
def philox_kernel(COUNTERS, WORDS, key_lo, key_hi, n, BLOCK: tl.constexpr):
    """tl.philox_impl of n counters given as four int32 planes [4, n]; the four output
    words go to WORDS [4, n] (uint32 bits stored as int32), as kernels/blocks.py calls it."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offsets < n
    c0 = tl.load(COUNTERS + offsets, mask=in_range).to(tl.uint32, bitcast=True)
    c1 = tl.load(COUNTERS + n + offsets, mask=in_range).to(tl.uint32, bitcast=True)
    c2 = tl.load(COUNTERS + 2 * n + offsets, mask=in_range).to(tl.uint32, bitcast=True)
    c3 = tl.load(COUNTERS + 3 * n + offsets, mask=in_range).to(tl.uint32, bitcast=True)
    w0, w1, w2, w3 = tl.philox_impl(c0, c1, c2, c3, key_lo.to(tl.uint32, bitcast=True),
                                    key_hi.to(tl.uint32, bitcast=True))
    tl.store(WORDS + offsets, w0.to(tl.int32, bitcast=True), mask=in_range)
    tl.store(WORDS + n + offsets, w1.to(tl.int32, bitcast=True), mask=in_range)
    tl.store(WORDS + 2 * n + offsets, w2.to(tl.int32, bitcast=True), mask=in_range)
    tl.store(WORDS + 3 * n + offsets, w3.to(tl.int32, bitcast=True), mask=in_range)


@triton.jit
def atomic_add_kernel(X, TOTAL, COUNT, BLOCK: tl.constexpr):
    """Every program adds its BLOCK values of X into the same BLOCK cells of TOTAL
    (programs collide on every cell) and 1 into the int32 COUNT."""
    lanes = tl.arange(0, BLOCK)
    tl.atomic_add(TOTAL + lanes, tl.load(X + tl.program_id(0) * BLOCK + lanes))
    tl.atomic_add(COUNT, 1)
