"""Argument checks for the public operators.

Every check runs before anything is launched and raises ValueError/TypeError
naming the argument and what was expected, so bad input never turns into a
crash deep inside a kernel or into silent garbage.
"""

from __future__ import annotations

import math
import numbers

import torch

from .targets import HEAD_DIMS

HIGH_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# 8-bit floats: forward only (no backward kernel), where the backend has fp8 MMA.
FP8 = {torch.float8_e4m3fn: "fp8e4m3", torch.float8_e5m2: "fp8e5m2"}
DTYPE_NAMES = {**HIGH_PRECISION, **FP8}


def check_tensor(name: str, t, rank: int = 4, dtypes: dict = HIGH_PRECISION) -> None:
    """A torch.Tensor of `rank` dims whose dtype is one of `dtypes` (dtype -> name)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name}: expected a rank-{rank} tensor (batch, heads, seqlen, head_dim), "
                         f"got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name}: expected dtype in ({names}), got {t.dtype}")


def check_same(names_and_tensors: dict, what: str) -> None:
    """All tensors agree on `what` ("dtype" or "device")."""
    items = list(names_and_tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if getattr(t, what) != getattr(first, what):
            raise ValueError(f"{name}: expected the same {what} as {first_name} "
                             f"({getattr(first, what)}), got {getattr(t, what)}")


def check_device(name: str, t: torch.Tensor, target) -> None:
    """t lives where the kernels.targets.Target runs: CPU under the interpreter, else a GPU."""
    if t.device.type == target.device:
        return
    if t.device.type == "cpu":
        raise ValueError(f"{name}: tensor is on the CPU; the Triton kernels need a GPU tensor, "
                         "or Triton's CPU interpreter (set TRITON_INTERPRET=1 before importing kernels)")
    raise ValueError(f"{name}: tensor is on {t.device}, but the kernels' target {target.name} "
                     f"runs on {target.device}")


def check_dtype_supported(name: str, t: torch.Tensor, target) -> None:
    """The target supports t's dtype (fp8 needs fp8 MMA: sm_89 and newer, gfx950)."""
    dtype = DTYPE_NAMES[t.dtype]
    if dtype not in target.dtypes:
        raise ValueError(f"{name}: dtype {t.dtype} ({dtype}) is not supported on target {target.name}; "
                         f"supported: {', '.join(target.dtypes)}")


def check_forward_only(name: str, t: torch.Tensor) -> None:
    """fp8 has no backward kernel: refuse to build an autograd graph we cannot finish."""
    if t.dtype in FP8 and t.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{name}: {t.dtype} inputs are forward-only (there is no fp8 backward); "
                         "detach them or call under torch.no_grad()")


def check_head_dim(head_dim: int) -> None:
    if head_dim not in HEAD_DIMS:
        dims = ", ".join(str(d) for d in HEAD_DIMS)
        raise ValueError(f"q: head_dim {head_dim} is not supported by the kernels; "
                         f"supported head dims: {dims}")


def check_sm_scale(sm_scale) -> float:
    if isinstance(sm_scale, torch.Tensor) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale: expected a Python float or None, got {type(sm_scale).__name__}")
    # The online softmax tracks the running max of unscaled scores, which is the
    # max of the scaled ones only for a positive scale.
    if not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale: expected a finite positive number, got {sm_scale}")
    return float(sm_scale)


def check_attention_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    batch, heads, _, head_dim = q.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"k, v: expected batch size {batch} (from q), got {k.shape[0]} and {v.shape[0]}")
    if k.shape != v.shape:
        raise ValueError(f"v: expected the same shape as k {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.shape[3] != head_dim:
        raise ValueError(f"k: expected head_dim {head_dim} (from q), got {k.shape[3]}")
    kv_heads = k.shape[1]
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"k: number of kv heads ({kv_heads}) must divide the number of "
                         f"query heads ({heads})")


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def check_dropout_p(p) -> float:
    """A real number in [0, 1): the probability of dropping an attention weight."""
    if isinstance(p, (bool, torch.Tensor)) or not isinstance(p, numbers.Real):
        raise TypeError(f"dropout_p: expected a Python float in [0, 1), got {type(p).__name__}")
    if not 0.0 <= p < 1.0:  # also rejects NaN
        raise ValueError(f"dropout_p: expected a probability in [0, 1), got {p}")
    return float(p)


def check_dropout_seed(seed):
    """None (draw one) or a Python int; ints are used mod 2^64 (Philox's 64-bit key)."""
    if seed is None:
        return None
    if isinstance(seed, (bool, torch.Tensor)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"dropout_seed: expected an int or None, got {type(seed).__name__}")
    return int(seed)

