"""`piecewise_attention`: the torch-facing operator around the piecewise kernels.

FlagAttention's NLPE operator: the score of (query i, key j) is q2_i . k2_j when
pos(i) - j >= dist_threshold and q1_i . k1_j otherwise, pos(i) = i + Sk - Sq
(a signed distance: keys after pos(i) always use q1 . k1).
Validation reuses kernels.validation (its messages renamed to this operator's
arguments), allocation kernels.allocation, launching kernels.launch (grids split
past CUDA's 65,535 batch x head limit), and the delta pre-pass is the flash
backward's kernel.
"""

from __future__ import annotations

import contextlib
import math
import re

import torch

from .allocation import new_forward_outputs, new_output
from .flash_backward import delta_kernel
from .launch import ceil_div, head_dim_bound, launch, launch_kwargs, launches_on_device, padded_head_dim
from .targets import current_target, interpreting
from .piecewise_backward import piecewise_dkdv_kernel, piecewise_dq_kernel
from .piecewise_forward import piecewise_forward_kernel
from .validation import (
    check_attention_shapes,
    check_device,
    check_flag,
    check_head_dim,
    check_same,
    check_sm_scale,
    check_tensor,
)
from ..reference.validation import check_dist_threshold


def _launch_kwargs(kernel: str, block_d: int, dtype: torch.dtype, **options) -> dict:
    """Launch config from the target's `piecewise_<kernel>` table if it has one,
    else the flash kernel's table of the same role."""
    try:
        return launch_kwargs(f"piecewise_{kernel}", block_d, dtype, **options)
    except KeyError:
        return launch_kwargs(kernel, block_d, dtype, **options)


def _forward(q1, k1, q2, k2, v, threshold: int, causal: bool, scale: float):
    batch, heads, seq_q, head_dim = q1.shape
    kv_heads, seq_k = k1.shape[1], k1.shape[2]
    out, lse, done = new_forward_outputs(q1, seq_k)
    if done:
        return out, lse
    block_d = padded_head_dim(head_dim, q1.dtype)
    cfg = _launch_kwargs("fwd", block_d, q1.dtype)
    head_dim = head_dim_bound(head_dim, block_d, cfg)  # None: no column masks
    launch(piecewise_forward_kernel, ceil_div(seq_q, cfg["BLOCK_M"]), batch * heads,
           q1, k1, q2, k2, v, out, lse, scale, threshold,
           *q1.stride(), *k1.stride(), *q2.stride(), *k2.stride(), *v.stride(), *out.stride(),
           heads, heads // kv_heads, seq_q, seq_k, head_dim,
           CAUSAL=causal, BLOCK_D=block_d, INTERPRETED=interpreting(), **cfg)
    return out, lse


def _delta(out, do, block_d: int):
    """delta_i = sum_d dO_id O_id (fp32), by the flash backward's pre-pass."""
    batch, heads, seq_q, head_dim = out.shape
    delta = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=out.device)
    pre = _launch_kwargs("bwd_preprocess", block_d, out.dtype, tiles=("BLOCK_M",))
    launch(delta_kernel, ceil_div(seq_q, pre["BLOCK_M"]), batch * heads,
           out, do, delta, *out.stride(), *do.stride(), heads, seq_q, head_dim_bound(head_dim, block_d),
           BLOCK_D=block_d, **pre)
    return delta


def _backward(saved, do, threshold: int, causal: bool, scale: float):
    q1, k1, q2, k2, v, out, lse = saved
    batch, heads, seq_q, head_dim = q1.shape
    kv_heads, seq_k = k1.shape[1], k1.shape[2]
    # One shape per group, so each kernel takes one set of gradient strides.
    dq1, dq2 = (new_output(q1.shape, q1.dtype, q1.device) for _ in range(2))
    dk1, dk2, dv = (new_output(k1.shape, k1.dtype, k1.device) for _ in range(3))
    if seq_q == 0 or seq_k == 0:
        return tuple(g.zero_() for g in (dq1, dk1, dq2, dk2, dv))
    block_d = padded_head_dim(head_dim, q1.dtype)
    delta = _delta(out, do, block_d)
    common = dict(CAUSAL=causal, BLOCK_D=block_d, INTERPRETED=interpreting())
    tensors = (q1, k1, q2, k2, v, do, lse, delta)
    strides = (*q1.stride(), *k1.stride(), *q2.stride(), *k2.stride(), *v.stride(), *do.stride())
    group = heads // kv_heads

    cfg = _launch_kwargs("bwd_dkdv", block_d, q1.dtype)
    launch(piecewise_dkdv_kernel, ceil_div(seq_k, cfg["BLOCK_N"]), batch * kv_heads,
           *tensors, dk1, dk2, dv, scale, threshold, *strides, *dk1.stride(),
           heads, kv_heads, group, seq_q, seq_k, head_dim_bound(head_dim, block_d, cfg), **common, **cfg)
    cfg = _launch_kwargs("bwd_dq", block_d, q1.dtype)
    launch(piecewise_dq_kernel, ceil_div(seq_q, cfg["BLOCK_M"]), batch * heads,
           *tensors, dq1, dq2, scale, threshold, *strides, *dq1.stride(),
           heads, group, seq_q, seq_k, head_dim_bound(head_dim, block_d, cfg), **common, **cfg)
    return dq1, dk1, dq2, dk2, dv


class _PiecewiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, v, threshold, causal, scale):
        out, lse = _forward(q1, k1, q2, k2, v, threshold, causal, scale)
        ctx.save_for_backward(q1, k1, q2, k2, v, out, lse)
        ctx.threshold, ctx.causal, ctx.scale = threshold, causal, scale
        return out

    @staticmethod
    def backward(ctx, do):
        grads = _backward(ctx.saved_tensors, do, ctx.threshold, ctx.causal, ctx.scale)
        return (*grads, None, None, None)


_FLASH_NAMES = {"q": "q1", "k": "k1", "sm_scale": "softmax_scale"}


@contextlib.contextmanager
def _named_for_piecewise():
    """The shared checks name flash_attention's arguments (q, k, sm_scale): say ours."""
    try:
        yield
    except (TypeError, ValueError) as err:
        message = re.sub(r"\b(q|k|sm_scale)\b", lambda m: _FLASH_NAMES[m.group(1)], str(err))
        raise type(err)(message) from None


def _validate(tensors: dict, dist_threshold, softmax_scale, causal) -> tuple[int, float]:
    """Check every argument before launching; return (threshold, scale)."""
    for name, t in tensors.items():
        check_tensor(name, t)
    for name, like in (("q2", "q1"), ("k2", "k1")):
        if tensors[name].shape != tensors[like].shape:
            raise ValueError(f"{name}: expected the same shape as {like} "
                             f"{tuple(tensors[like].shape)}, got {tuple(tensors[name].shape)}")
    check_same(tensors, "dtype")
    check_same(tensors, "device")
    if launches_on_device():
        check_device("q1", tensors["q1"], current_target())
    with _named_for_piecewise():
        check_attention_shapes(tensors["q1"], tensors["k1"], tensors["v"])
        check_head_dim(tensors["q1"].shape[3])
        scale = (1.0 / math.sqrt(tensors["q1"].shape[3]) if softmax_scale is None
                 else check_sm_scale(softmax_scale))
    check_flag("causal", causal)
    return check_dist_threshold(dist_threshold), scale


def piecewise_attention(q1, k1, q2, k2, v, dist_threshold, softmax_scale=None, causal=False):
    """Piecewise (NLPE) attention, FlashAttention-2 style, with autograd.

    q1, q2: (batch, heads, seq_q, head_dim); k1, k2, v: (batch, kv_heads, seq_k,
    head_dim), kv_heads dividing heads (MQA/GQA); fp16, bf16 or fp32, all alike.
    The score of query i and key j is q2_i . k2_j if i + seq_k - seq_q - j >=
    dist_threshold, else q1_i . k1_j, times softmax_scale (default
    1/sqrt(head_dim)).  The distance is signed (FlagAttention's): keys after
    the query's aligned position always use q1 . k1.  dist_threshold: a
    non-negative int; 0 uses q2 . k2 on every key a causal mask shows.
    causal: key j visible to query i iff j <= i + seq_k - seq_q (the same
    bottom-right alignment); rows that see no key give output 0.

    Returns out, like q1.  Gradients flow to q1, k1, q2, k2 and v (dk1, dk2, dv
    summed over the query heads sharing a kv head).
    """
    tensors = {"q1": q1, "k1": k1, "q2": q2, "k2": k2, "v": v}
    threshold, scale = _validate(tensors, dist_threshold, softmax_scale, causal)
    # Every distance is at most seq_k - 1, so any threshold >= seq_k (seq_q + seq_k
    # among them) selects q1 . k1 everywhere; clamping keeps it a 32-bit int.
    threshold = min(threshold, q1.shape[2] + k1.shape[2])
    return _PiecewiseAttention.apply(q1, k1, q2, k2, v, threshold, causal, scale)
