"""Score products read from memory a slice of the head dim at a time (HEAD_CHUNK).

Each kernel keeps some [rows, D] operand for its whole loop: the forward its Q tile,
dK/dV its K and V, dQ its Q and dO.  Every wave that multiplies by such an operand holds
all D of its columns for its rows; on RDNA (32-wide waves, 256 VGPRs per work-item, and
gfx11's WMMA holds each operand twice) a 16 x 256 fp16 operand alone takes 128 VGPRs,
two of them all 256, and the compiler spills the rest to scratch memory, whatever the
tile (kernels/tables_amd.py has the measurements).

With a launch's HEAD_CHUNK set (0 = off: every NVIDIA and CDNA table), a kernel keeps no
such operand: it keeps the operand's base pointer, and each product over the head dim
(the scores q @ k^T, and dO @ V^T in the backward) is summed in fp32 over HEAD_CHUNK-wide
column slices of both operands, each slice loaded when it is used.  The re-read bytes are
the same every step, so they come from the cache; a slice needs 1/(D/HEAD_CHUNK) of the
registers.  Products whose result spans the head dim (P @ V, dS @ K, P^T @ dO, dS^T @ Q)
still take whole tiles: their [rows, D] operand and result are spread over the waves
along D, a few registers each.

Summing slices with the accumulator threaded through tl.dot is what one MMA over the
whole head dim does internally (it too walks K in steps of 16 or 32), in fp32 either way.
"""

import triton
import triton.language as tl

from .blocks import load_tile, mma


@triton.jit
def kept_operand(base, rows, dims, stride_row, stride_col, n_rows, n_cols, HEAD_CHUNK: tl.constexpr):
    """What a kernel keeps of a loop-invariant [rows, dims] operand at `base`: the loaded
    tile, or (HEAD_CHUNK) the base pointer, from which sliced_products reads it."""
    if HEAD_CHUNK:  # one return: see blocks.load_rows
        kept = base
    else:
        kept = load_tile(base, rows, dims, stride_row, stride_col, n_rows, n_cols)
    return kept


@triton.jit
def sliced_products(a_base, a_rows, a_stride_row, a_stride_col, a_bound,
                    b_base, b_rows, b_stride_row, b_stride_col, b_bound,
                    head_dim, BLOCK_D: tl.constexpr, HEAD_CHUNK: tl.constexpr, INTERPRETED: tl.constexpr):
    """a @ b^T, fp32, of the [a_rows, D] tile at a_base and the [b_rows, D] tile at
    b_base, read and multiplied HEAD_CHUNK columns at a time; rows at or past a bound
    (None: none) and columns past head_dim read 0, as load_tile's."""
    tl.static_assert(BLOCK_D % HEAD_CHUNK == 0, "sliced_products: HEAD_CHUNK must divide BLOCK_D")
    tl.static_assert(head_dim is not None, "sliced_products: a sliced launch passes the head dim "
                                           "(kernels.launch.head_dim_bound)")
    acc = tl.zeros((a_rows.shape[0], b_rows.shape[0]), dtype=tl.float32)
    # A loop to the run-time head dim: unrolled, the compiler schedules every slice's loads
    # up front and holds them all, which is what slicing is there to avoid.  With the
    # constant bound BLOCK_D, triton 3.9 unrolled four slices (eight it kept as a loop) and
    # triton 3.6 unrolled eight too (gfx1201 dK/dV at D = 256 spilled 48-88 B per thread;
    # loop_unroll_factor=1 did not stop it); a trip count it cannot see it keeps as a loop.
    for first_col in range(0, head_dim, HEAD_CHUNK):
        cols = first_col + tl.arange(0, HEAD_CHUNK)
        a = load_tile(a_base, a_rows, cols, a_stride_row, a_stride_col, a_bound, head_dim)
        b = load_tile(b_base, b_rows, cols, b_stride_row, b_stride_col, b_bound, head_dim)
        acc = mma(a, tl.trans(b), acc, INTERPRETED)
    return acc
