"""Declarative description of the arithmetic precision of an attention computation.

One chunked algorithm (``reference.attention``) is parameterised by a :class:`Precision`:

* ``REFERENCE`` -- the project's "fp32 reference": inputs upcast to float64 and every operation in
  float64, so it is also a valid reference for float32 kernels.
* ``MATCHED`` -- the "same-precision torch path": what a fused FlashAttention kernel does.
  Matmul operands in the input dtype, products accumulated in float32, softmax/lse/delta in
  float32, P and dS rounded to the input dtype before the matmuls that consume them, and
  out/dq/dk/dv rounded to the input dtype at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch

from .tf32 import round_to_tf32


@dataclass(frozen=True)
class Precision:
    """How each stage of attention is rounded.

    Attributes:
        name: short label used in reprs and reports.
        operand_dtype: dtype matmul operands (q, k, v, do, out) are rounded to; ``None`` means
            "the input dtype".
        accumulate_dtype: dtype of matmul accumulation, softmax, lse, delta and of the dk/dv
            accumulators across query chunks.
        round_p_and_ds: round P (forward and backward) and dS (backward) to the operand dtype
            before the matmuls that consume them, as a fused kernel feeding its MMA does.
        output_dtype: dtype of out, dq, dk, dv; ``None`` means "the input dtype".
            lse is always returned in ``accumulate_dtype``.
        tf32_operands: fp32 matmul operands (and P, dS) rounded to TF32, as a kernel that
            computes its fp32 products on tensor cores at TF32 by design.
    """

    name: str
    operand_dtype: Optional[torch.dtype]
    accumulate_dtype: torch.dtype
    round_p_and_ds: bool
    output_dtype: Optional[torch.dtype]
    tf32_operands: bool = False

    def operand_dtype_for(self, input_dtype: torch.dtype) -> torch.dtype:
        """The dtype matmul operands are rounded to, for inputs of ``input_dtype``."""
        return input_dtype if self.operand_dtype is None else self.operand_dtype

    def output_dtype_for(self, input_dtype: torch.dtype) -> torch.dtype:
        """The dtype of out/dq/dk/dv, for inputs of ``input_dtype``: fp16 for 8-bit
        inputs, whose 2-3 mantissa bits would round away the result's accuracy."""
        if self.output_dtype is not None:
            return self.output_dtype
        return torch.float16 if input_dtype.itemsize == 1 else input_dtype

    def as_operand(self, x: torch.Tensor, input_dtype: torch.dtype) -> torch.Tensor:
        """Round ``x`` to the operand dtype, then widen it to the accumulate dtype.

        Widening fp16/bf16 to fp32 is exact, and so is the product of two such values in fp32
        (11+11 resp. 8+8 significand bits fit in fp32's 24). A matmul of two tensors prepared
        this way, run in fp32, therefore equals an fp16/bf16 MMA with fp32 accumulation up to
        the order of the additions.
        """
        operand = x.to(self.operand_dtype_for(input_dtype))
        if self.tf32_operands and operand.dtype == torch.float32:
            operand = round_to_tf32(operand)
        return operand.to(self.accumulate_dtype)

    def round_intermediate(self, x: torch.Tensor, input_dtype: torch.dtype) -> torch.Tensor:
        """P or dS as fed to the next matmul: rounded to the operand dtype if the policy says so."""
        if not self.round_p_and_ds:
            return x
        return self.as_operand(x, input_dtype)


REFERENCE = Precision(
    name="reference",
    operand_dtype=torch.float64,
    accumulate_dtype=torch.float64,
    round_p_and_ds=False,
    output_dtype=torch.float64,
)

MATCHED = Precision(
    name="matched",
    operand_dtype=None,
    accumulate_dtype=torch.float32,
    round_p_and_ds=True,
    output_dtype=None,
)

# MATCHED for a kernel that declares fp32 products at TF32 (conformance.judging.conventions):
# its fp32 matmul operands, P and dS rounded to TF32; fp16/bf16 inputs are unaffected.
MATCHED_TF32 = replace(MATCHED, name="matched-tf32", tf32_operands=True)
