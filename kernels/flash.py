"""`flash_attention`: the torch-facing operator around the Triton kernels.

It validates arguments, allocates outputs (NaN-poisoned under the harness),
picks launch configurations from the active backend profile, launches, and
wires the backward kernels into autograd.
"""

from __future__ import annotations

import math

import torch
import triton

from conformance.backends import active_profile
from kernels.allocation import new_output
from kernels.flash_backward import delta_kernel, dkdv_kernel, dq_kernel
from kernels.flash_forward import flash_forward_kernel
from kernels.validation import (
    DTYPE_NAMES,
    check_attention_shapes,
    check_device,
    check_head_dim,
    check_same,
    check_sm_scale,
    check_tensor,
)


def _padded_head_dim(head_dim: int) -> int:
    # tl.arange and tl.dot need a power of two >= 16; padding lanes are masked.
    return max(16, triton.next_power_of_2(head_dim))


def _launch_kwargs(kernel: str, block_d: int, dtype: torch.dtype) -> dict:
    cfg = active_profile().launch_config(kernel, block_d, DTYPE_NAMES[dtype])
    return dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _forward(q, k, v, causal: bool, sm_scale: float):
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    out = new_output(q.shape, q.dtype, q.device)
    lse = new_output((batch, heads, seq_q), torch.float32, q.device)
    if seq_q == 0:
        return out, lse
    if seq_k == 0:  # nothing to attend to: every row is empty
        return out.zero_(), lse.fill_(float("-inf"))
    block_d = _padded_head_dim(head_dim)
    launch = _launch_kwargs("fwd", block_d, q.dtype)
    grid = (triton.cdiv(seq_q, launch["BLOCK_M"]), batch * heads)
    flash_forward_kernel[grid](
        q, k, v, out, lse, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, heads // kv_heads, seq_q, seq_k, head_dim,
        CAUSAL=causal, BLOCK_D=block_d,
        EMULATE_BF16=active_profile().emulate_bf16, **launch,
    )
    return out, lse


def _backward(q, k, v, out, lse, do, causal: bool, sm_scale: float):
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    dq = new_output(q.shape, q.dtype, q.device)
    dk = new_output(k.shape, k.dtype, k.device)
    dv = new_output(v.shape, v.dtype, v.device)
    if seq_q == 0 or seq_k == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    block_d = _padded_head_dim(head_dim)
    emulate = active_profile().emulate_bf16
    common = (heads, seq_q, head_dim)

    delta = torch.empty((batch, heads, seq_q), dtype=torch.float32, device=q.device)
    pre = _launch_kwargs("bwd_preprocess", block_d, q.dtype)
    delta_kernel[(triton.cdiv(seq_q, pre["BLOCK_M"]), batch * heads)](
        out, do, delta, *out.stride(), *do.stride(), *common,
        BLOCK_M=pre["BLOCK_M"], BLOCK_D=block_d, num_warps=pre["num_warps"],
    )

    group = heads // kv_heads
    shapes = (seq_q, seq_k, head_dim)
    inputs = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    dkdv = _launch_kwargs("bwd_dkdv", block_d, q.dtype)
    dkdv_kernel[(triton.cdiv(seq_k, dkdv["BLOCK_N"]), batch * kv_heads)](
        q, k, v, do, lse, delta, dk, dv, sm_scale,
        *inputs, *dk.stride(), *dv.stride(),
        heads, kv_heads, group, *shapes,
        CAUSAL=causal, BLOCK_D=block_d, EMULATE_BF16=emulate, **dkdv,
    )
    dqk = _launch_kwargs("bwd_dq", block_d, q.dtype)
    dq_kernel[(triton.cdiv(seq_q, dqk["BLOCK_M"]), batch * heads)](
        q, k, v, do, lse, delta, dq, sm_scale,
        *inputs, *dq.stride(),
        heads, group, *shapes,
        CAUSAL=causal, BLOCK_D=block_d, EMULATE_BF16=emulate, **dqk,
    )
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale):
        out, lse = _forward(q, k, v, causal, sm_scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale = causal, sm_scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, do, ctx.causal, ctx.sm_scale)
        return dq, dk, dv, None, None


def flash_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Scaled dot-product attention, FlashAttention-2 style, with autograd.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_k, head_dim)
    with kv_heads dividing heads (MQA/GQA). fp16, bf16 or fp32, all the same.
    causal: bottom-right aligned mask (key j visible to query i iff
        j <= i + seq_k - seq_q); rows that see no key give output 0.
    sm_scale: score scale, default 1/sqrt(head_dim).
    return_log_normalizer: also return lse = ln(sum_j exp(sm_scale q.k_j)),
        shape (batch, heads, seq_q), fp32 (-inf for rows that see no key).

    Returns out (like q), or (out, lse).  Strided (non-contiguous) inputs are
    read in place through their strides, never copied.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
    tensors = {"q": q, "k": k, "v": v}
    check_same(tensors, "dtype")
    check_same(tensors, "device")
    profile = active_profile()
    check_device("q", q, profile)
    check_attention_shapes(q, k, v)
    check_head_dim(q.shape[3], profile)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    sm_scale = 1.0 / math.sqrt(q.shape[3]) if sm_scale is None else check_sm_scale(sm_scale)

    out, lse = _FlashAttention.apply(q, k, v, causal, sm_scale)
    return (out, lse) if return_log_normalizer else out
