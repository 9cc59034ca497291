"""Output allocation for the bundled kernels, with optional poisoning.

A conformance run must notice output elements a kernel never writes.  `torch.empty`
may hand back memory that happens to hold a plausible earlier result, so while
`poisoned_outputs()` is active every output and gradient buffer is NaN-filled
before the launch instead; any element left unwritten then shows up as `nonfinite`.
Outside the context manager allocation is a plain `torch.empty` (no extra pass
over memory in production use).
"""

from __future__ import annotations

import contextlib
import threading

import torch

_state = threading.local()


def poisoning() -> bool:
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def poisoned_outputs():
    """NaN-fill kernel outputs and gradients before each launch while active."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def new_output(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if poisoning():
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def output_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """The dtype of the attention output: the input dtype, except fp16 for fp8 inputs
    (3 or 2 mantissa bits would round away most of the accuracy the kernel has;
    fp16 holds every convex combination of fp8 values' range, max 57,344 < 65,504)."""
    return torch.float16 if input_dtype.itemsize == 1 else input_dtype


def new_forward_outputs(q: torch.Tensor, seq_k: int):
    """(out (B, H, Sq, D) of `output_dtype`, lse (B, H, Sq) fp32, done): `done` when
    the problem is empty and the outputs are already final -- nothing for Sq = 0,
    and for Sk = 0 every row sees no key (out 0, lse -inf)."""
    batch, heads, seq_q, _ = q.shape
    out = new_output(q.shape, output_dtype(q.dtype), q.device)
    lse = new_output((batch, heads, seq_q), torch.float32, q.device)
    if seq_q == 0:
        return out, lse, True
    if seq_k == 0:
        return out.zero_(), lse.fill_(float("-inf")), True
    return out, lse, False


def new_varlen_forward_outputs(q: torch.Tensor, total_k: int):
    """The varlen counterpart of `new_forward_outputs`: out (total_q, H, D) and lse
    (H, total_q) fp32, FlashAttention-2's varlen layout; `done` when q has no token, or
    k none (every row then sees no key).  Sequences of no token within a batch are the
    kernels' business."""
    total_q, heads, _ = q.shape
    out = new_output(q.shape, output_dtype(q.dtype), q.device)
    lse = new_output((heads, total_q), torch.float32, q.device)
    if total_q == 0:
        return out, lse, True
    if total_k == 0:
        return out.zero_(), lse.fill_(float("-inf")), True
    return out, lse, False
