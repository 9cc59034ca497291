"""The smallest kernel that needs of a compiler what every bundled kernel needs of it for
one input dtype: a tl.dot of two operands of that dtype into fp32, lowered to the target's
matrix unit (mma, wgmma, tcgen05, MFMA, WMMA; fp32 on FMA units, "ieee" as the kernels ask).

The compile-only tier compiles it for each target before anything else: fp16 first --
where that does not compile, the installed triton cannot compile for the target at all
(its backend or its assembler does not know the architecture) -- then every other dtype
of the profile (triton 3.2's AMD backend takes fp8e5 but not fp8e4nv, for one).  What it
refuses is `unsupported` with the compiler's reason instead of a column of errors.
Imported by the worker only after it has cleared TRITON_INTERPRET (triton reads it when a
kernel is defined).
"""

from __future__ import annotations

import triton
import triton.language as tl

# 32: the smallest K every matrix unit takes for every dtype (fp8 dots consume K in 32s).
SIZE = 32


@triton.jit
def matrix_unit_probe(A, B, C, IEEE: tl.constexpr):
    rows = tl.arange(0, 32)
    tiles = rows[:, None] * 32 + rows[None, :]
    a, b = tl.load(A + tiles), tl.load(B + tiles)
    if IEEE:
        product = tl.dot(a, b, input_precision="ieee")
    else:
        product = tl.dot(a, b)
    tl.store(C + tiles, product)


def compile_probe(dtype: str) -> None:
    """Compile the probe for `dtype` operands (a DTYPE_NAMES name) on the active
    (compile-only) driver's target; raises what the compiler raises."""
    import torch

    from conformance.bundled.kernels.validation import DTYPE_NAMES

    torch_dtype = {name: value for value, name in DTYPE_NAMES.items()}[dtype]
    operand, product = torch.zeros(SIZE, SIZE).to(torch_dtype), torch.zeros(SIZE, SIZE)
    matrix_unit_probe.warmup(operand, operand, product, IEEE=dtype == "fp32", grid=(1,))
