"""Argument checks for the attention reference, with messages that name the offending argument."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional

import torch

from .precision import Precision

_FLOAT_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FLOAT_DTYPE_NAMES = [str(dtype).removeprefix("torch.") for dtype in _FLOAT_DTYPES]
_FLOAT_DTYPE_TEXT = f"{', '.join(_FLOAT_DTYPE_NAMES[:-1])} or {_FLOAT_DTYPE_NAMES[-1]}"


@dataclass(frozen=True)
class Dims:
    """Problem sizes: q (batch, heads, sq, head_dim); k, v (batch, kv_heads, sk, head_dim)."""

    batch: int
    heads: int
    kv_heads: int
    sq: int
    sk: int
    head_dim: int

    @property
    def group(self) -> int:
        """Query heads per kv head (1 for MHA, heads for MQA)."""
        return self.heads // self.kv_heads

    @property
    def units(self) -> int:
        """Independent (batch, kv head) pairs; each serves ``group`` query heads."""
        return self.batch * self.kv_heads


def _check_tensor(name: str, x: object, rank: int, layout: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != rank:
        raise ValueError(f"{name} must have rank {rank} {layout}, got shape {tuple(x.shape)}")
    if x.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name} must be {_FLOAT_DTYPE_TEXT}, got {x.dtype}")
    return x


def _check_same_device(name: str, x: torch.Tensor, q: torch.Tensor) -> None:
    if x.device != q.device:
        raise ValueError(f"{name} is on {x.device} but q is on {q.device}")


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Dims:
    """Validate q (B, H, Sq, D), k and v (B, Hkv, Sk, D); return the sizes."""
    _check_tensor("q", q, 4, "(B, H, Sq, D)")
    _check_tensor("k", k, 4, "(B, Hkv, Sk, D)")
    _check_tensor("v", v, 4, "(B, Hkv, Sk, D)")
    batch, heads, sq, head_dim = q.shape
    for name, x in (("k", k), ("v", v)):
        _check_same_device(name, x, q)
        if x.dtype != q.dtype:
            raise ValueError(f"{name} dtype {x.dtype} does not match q dtype {q.dtype}")
        if x.shape[0] != batch:
            raise ValueError(f"{name} batch size {x.shape[0]} does not match q batch size {batch}")
        if x.shape[3] != head_dim:
            raise ValueError(f"{name} head_dim {x.shape[3]} does not match q head_dim {head_dim}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"k has {k.shape[1]} heads but v has {v.shape[1]}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k sequence length (Sk) {k.shape[2]} does not match v's {v.shape[2]}")
    kv_heads = k.shape[1]
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(
            f"q heads H={heads} must be a multiple of k/v heads Hkv={kv_heads} (GQA/MQA)"
        )
    return Dims(batch, heads, kv_heads, sq, k.shape[2], head_dim)


def check_backward_args(
    q: torch.Tensor, out: torch.Tensor, do: torch.Tensor, lse: torch.Tensor
) -> None:
    """Validate out and do (B, H, Sq, D) and lse (B, H, Sq) against q."""
    _check_tensor("out", out, 4, "(B, H, Sq, D)")
    _check_tensor("do", do, 4, "(B, H, Sq, D)")
    _check_tensor("lse", lse, 3, "(B, H, Sq)")
    for name, x in (("out", out), ("do", do), ("lse", lse)):
        _check_same_device(name, x, q)
    for name, x in (("out", out), ("do", do)):
        if x.shape != q.shape:
            raise ValueError(
                f"{name} shape {tuple(x.shape)} does not match q shape {tuple(q.shape)}")
    if lse.shape != q.shape[:3]:
        raise ValueError(
            f"lse shape {tuple(lse.shape)} does not match (B, H, Sq) = {tuple(q.shape[:3])}")


def check_options(
    head_dim: int, sm_scale: Optional[float], precision: Precision, max_chunk_bytes: int
) -> float:
    """Validate the keyword options; return the softmax scale (default 1/sqrt(head_dim))."""
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a reference.Precision, got {type(precision).__name__}")
    is_int = isinstance(max_chunk_bytes, numbers.Integral) and not isinstance(max_chunk_bytes, bool)
    if not is_int or max_chunk_bytes <= 0:
        raise ValueError(f"max_chunk_bytes must be a positive int, got {max_chunk_bytes!r}")
    if sm_scale is None:
        if head_dim == 0:
            raise ValueError("sm_scale must be given when head_dim is 0")
        return 1.0 / math.sqrt(head_dim)
    scale = float(sm_scale)
    if not math.isfinite(scale):
        raise ValueError(f"sm_scale must be finite, got {sm_scale!r}")
    return scale


def check_dropout(dropout: object) -> None:
    """None, or a ``reference.Dropout`` (anything with a probability ``p`` in [0, 1) and a
    ``chunk`` method, so a harness may wrap it, e.g. to record keep rates)."""
    if dropout is None:
        return
    p = getattr(dropout, "p", None)
    if not callable(getattr(dropout, "chunk", None)) or not isinstance(p, numbers.Real):
        raise TypeError(f"dropout must be a reference.Dropout or None, got {type(dropout).__name__}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout.p must be in [0, 1), got {p!r}")


def check_dist_threshold(dist_threshold) -> int:
    """piecewise_attention's near/far distance threshold: a non-negative int (shared
    by the reference and the bundled operator, so both say the same about it)."""
    if isinstance(dist_threshold, bool) or not isinstance(dist_threshold, numbers.Integral):
        raise TypeError(f"dist_threshold: expected a non-negative int, got "
                        f"{type(dist_threshold).__name__}")
    if dist_threshold < 0:
        raise ValueError(f"dist_threshold: expected a non-negative int, got {dist_threshold}")
    return int(dist_threshold)
