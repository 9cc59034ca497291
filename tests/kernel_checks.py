"""Helpers shared by the kernel tests: seeded inputs, and running the bundled
flash_attention and both reference paths on the same case so the 2x rule
(conformance.judging.rule) can judge each tensor, as the harness does.

Import after `conformance.backends.activate()` (the kernels must see TRITON_INTERPRET)."""

from __future__ import annotations

import functools

import torch

from conformance.bundled import kernels
from conformance.backends import active_profile
from conformance.judging.operators import FLASH_ATTENTION
from conformance.judging.rule import compare_tensor
from conformance.bundled.kernels.validation import DTYPE_NAMES
from conformance.bundled.reference import MATCHED, REFERENCE, Dropout, attention_backward, attention_forward


def make_qkv(batch=1, heads=2, kv_heads=2, seq_q=40, seq_k=40, head_dim=16, dtype=torch.float16, seed=0):
    """q, k, v and an output gradient do, drawn in fp32 on the CPU, on the backend's device."""
    gen = torch.Generator().manual_seed(seed)
    q_shape, kv_shape = (batch, heads, seq_q, head_dim), (batch, kv_heads, seq_k, head_dim)
    device = active_profile().device
    return [torch.randn(s, generator=gen).to(dtype=dtype, device=device)
            for s in (q_shape, kv_shape, kv_shape, q_shape)]


def replay(q, k, p: float, seed: int) -> Dropout:
    """The reference's view of the kernel's dropout: its own mask, chunk by chunk."""
    batch, heads, seq_q, _ = q.shape
    return Dropout(p, functools.partial(kernels.dropout_keep_mask, seed, p, batch, heads, seq_q,
                                        k.shape[2], device=q.device))


def kernel_tensors(q, k, v, do, causal, p=0.0, seed=0, total=False, **options) -> dict:
    """out, lse (and total) of a forward, and dq, dk, dv of its backward for `do`."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse, *rest = kernels.flash_attention(*leaves, causal=causal, return_log_normalizer=True,
                                              return_total_attention=total, dropout_p=p,
                                              dropout_seed=seed, **options)
    grads = torch.autograd.grad(out, leaves, do)
    tensors = dict(out=out.detach(), lse=lse, dq=grads[0], dk=grads[1], dv=grads[2])
    return {**tensors, "total": rest[0]} if total else tensors


def reference_tensors(q, k, v, do, causal, precision, dropout=None, total=False) -> dict:
    out, lse, *rest = attention_forward(q, k, v, causal=causal, precision=precision, dropout=dropout,
                                        return_total=total)
    dq, dk, dv = attention_backward(q, k, v, out, do, lse, causal=causal, precision=precision,
                                    dropout=dropout)
    tensors = dict(out=out, lse=lse, dq=dq, dk=dk, dv=dv)
    return {**tensors, "total": rest[0]} if total else tensors


def judge_kernel(q, k, v, do, causal, p=0.0, seed=0, total=False) -> dict:
    """name -> compare_tensor record of the kernel against REFERENCE, allowed by MATCHED."""
    dropout = replay(q, k, p, seed) if p else None
    kernel = kernel_tensors(q, k, v, do, causal, p, seed, total)
    ref = reference_tensors(q, k, v, do, causal, REFERENCE, dropout, total)
    matched = reference_tensors(q, k, v, do, causal, MATCHED, dropout, total)
    dtype = DTYPE_NAMES[q.dtype]
    term_sizes = FLASH_ATTENTION.term_sizes(None, {"q": q, "k": k, "v": v})
    return {name: compare_tensor(name, kernel[name], matched[name], ref[name],
                                 "fp32" if name in ("lse", "total") else dtype, term_size=term_sizes.get(name, 0.0))
            for name in ref}


def assert_rule(records: dict) -> None:
    failed = {name: (r["ratio"], r["kernel_err"], r["torch_err"]) for name, r in records.items()
              if not r["passed"] or r["nonfinite"]}
    assert not failed, f"2x rule broken (ratio, kernel_err, torch_err): {failed}"
