"""Keep CUDA float32 matmuls in true IEEE fp32 (no TF32) for the duration of a block.

The same-precision path for float32 inputs must be real fp32, and its fp16/bf16 paths run their
matmuls on fp32 operands; with TF32 on, cuBLAS would round those operands to 10 mantissa bits.
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
