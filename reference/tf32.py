"""TF32 in the reference: kept out of its matmuls, and modelled where a kernel declares it.

`ieee_fp32_matmul` keeps CUDA float32 matmuls in true IEEE fp32 (no TF32) for the duration of a
block: the same-precision path for float32 inputs must be real fp32, and its fp16/bf16 paths run
their matmuls on fp32 operands; with TF32 on, cuBLAS would round those operands to 10 mantissa
bits. `round_to_tf32` is that rounding made explicit, for the torch path of a kernel that
declares fp32 products at TF32 (reference.MATCHED_TF32): the same on every device, where torch's
own TF32 switch only acts on CUDA.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """Disable TF32 for CUDA matmuls inside the block and restore the caller's setting after.

    Uses the legacy ``torch.backends.cuda.matmul.allow_tf32`` flag. Since torch 2.9, reading
    that flag raises a RuntimeError once the caller has configured TF32 through the newer
    ``fp32_precision`` API (torch refuses "a mix of the legacy and new APIs"); in that case the
    new API is used instead, so the caller's configuration is neither mixed nor lost.
    """
    matmul = torch.backends.cuda.matmul
    try:
        saved = matmul.allow_tf32
    except RuntimeError:
        saved_precision = matmul.fp32_precision
        matmul.fp32_precision = "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = saved_precision
        return
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = saved


# TF32 keeps fp32's 8 exponent bits and 10 of its 23 mantissa bits: the low 13 go.
_TF32_DROPPED_BITS = 13


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 values rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as
    NVIDIA's cvt.rna.tf32.f32 feeding a tensor core: add half of the dropped part's weight to
    the magnitude bits, then clear the dropped bits (a carry rounds up into the exponent, and
    past the largest finite value to inf, as the hardware does). Infinities stay; NaN stays NaN."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_to_tf32: expected float32, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    half = 1 << (_TF32_DROPPED_BITS - 1)
    rounded = (bits + half) & ~((1 << _TF32_DROPPED_BITS) - 1)
    return torch.where(torch.isnan(x), x, rounded.view(torch.float32).view(x.shape))
