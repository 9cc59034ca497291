"""Triton's CPU interpreter (TRITON_INTERPRET=1): runs the kernels on CPU tensors."""

from __future__ import annotations

from conformance.backends.profile import HEAD_DIMS, BackendProfile
from conformance.bundled.kernels import targets

INTERPRETER = BackendProfile(
    name="interpreter",
    arch="cpu",
    device="cpu",
    dtypes=targets.INTERPRETER.dtypes,
    head_dims=HEAD_DIMS,
    default_tier="smoke",
    target=targets.INTERPRETER,
    tf32_dot=True,
    detection="TRITON_INTERPRET set to anything but 0, or no GPU that torch can use",
    notes=(
        "Triton's interpreter returns garbage from tl.dot on bf16 operands (measured "
        "in triton 3.2, 3.6 and 3.9). The kernels upcast bf16 dot operands to fp32 "
        "here: a bf16 x bf16 product is exact in fp32 and the accumulation is fp32 "
        "anyway, so the result is what bf16 tensor cores compute.",
        "Triton's interpreter casts fp32 to bf16 by truncation, not round-to-nearest-even "
        "(measured in triton 3.9: half of uniform [0, 1) values differ from torch's cast, "
        "mean signed error -1.3e-3). Rounding probabilities always down biases dV by up "
        "to 2.7x the torch path's error. The kernels round to nearest even in integer "
        "arithmetic before every bf16 cast here, so the cast is exact.",
        "Triton's interpreter computes an fp32 tl.dot with numpy's matmul, which rounds "
        "the same dot product differently for different operand shapes (measured: most "
        "entries of a 16x192 by 192x16 product differ from the same entries of a 64x64 "
        "one). The forward's scores and the backward's recomputed ones then disagree, "
        "and the fp32 backward of small problems was up to 3.9x less accurate than torch "
        "(an H100 runs the same cases at 0.8-0.9x torch). The kernels sum exact fp32 "
        "products in fp64 and round once here (an MMA's products are exact too).",
    ),
)
