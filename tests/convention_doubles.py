"""Attention doubles that follow a documented convention other than the operator's own
(conformance.judging.conventions), each with and without declaring it:

* lse_plus_inf   -- `exact`, but rows that see no key get lse = +inf (FlashAttention-2's CUDA
                    kernels), declared `lse_empty_rows = "+inf"`; lse_plus_inf_undeclared: the same.
* lse_zero       -- declares "+inf" but writes 0 there: never a convention.
* top_left       -- the causal mask aligned top-left (j <= i), declared; the undeclared one is
                    tests.fake_kernels:causal_top_left.
* tf32           -- fp32 inputs rounded to TF32 before exact maths (products at TF32, as a Triton
                    kernel's default `tl.dot` on NVIDIA), declared `fp32_matmul = "tf32"`;
                    tf32_undeclared: the same.
* bundled_lse_plus_inf -- the bundled Triton kernel writing +inf on empty rows, declared;
                    bundled_lse_plus_inf_undeclared: the same (the H100 run).

None forwards FlashAttention-2's variants: each declares window, softcap, alibi and varlen
false (tests.fake_kernels.without_variants).
"""

from __future__ import annotations

import math

import torch

from conformance.bundled.reference.tf32 import round_to_tf32
from tests.fake_kernels import _attention64, exact, without_variants


def _plus_inf_lse(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    if not return_log_normalizer:
        return result
    out, lse = result
    return out, lse.masked_fill(lse == -math.inf, math.inf)


def lse_plus_inf(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    return _plus_inf_lse(q, k, v, causal, sm_scale, return_log_normalizer)


lse_plus_inf.capabilities = {"lse_empty_rows": "+inf", "reason": "FlashAttention-2's convention"}


def lse_plus_inf_undeclared(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    return _plus_inf_lse(q, k, v, causal, sm_scale, return_log_normalizer)


def lse_zero(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    if not return_log_normalizer:
        return result
    out, lse = result
    return out, lse.masked_fill(lse == -math.inf, 0.0)


lse_zero.capabilities = {"lse_empty_rows": "+inf"}


def top_left(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    out, lse = _attention64(q, k, v, causal, sm_scale, diagonal=0)
    out = out.to(q.dtype)
    return (out, lse.to(torch.float32)) if return_log_normalizer else out


top_left.capabilities = {"causal_alignment": "top_left", "reason": "torch SDPA's is_causal"}


def _tf32(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    if q.dtype == torch.float32:
        q, k, v = (round_to_tf32(t.detach()) for t in (q, k, v))
    return exact(q, k, v, causal, sm_scale, return_log_normalizer)


def tf32(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    return _tf32(q, k, v, causal, sm_scale, return_log_normalizer)


tf32.capabilities = {"fp32_matmul": "tf32", "directions": ["fwd"], "reason": "TF32 products by design"}


def tf32_undeclared(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    return _tf32(q, k, v, causal, sm_scale, return_log_normalizer)


tf32_undeclared.capabilities = {"directions": ["fwd"]}


def bundled_lse_plus_inf(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """The bundled Triton kernel with FlashAttention-2's convention for rows that see no key
    (lse = +inf), declared: a real GPU kernel for the H100 run (scripts/conventions_session.sh)."""
    return _bundled_plus_inf(q, k, v, causal, sm_scale, return_log_normalizer)


bundled_lse_plus_inf.capabilities = {"lse_empty_rows": "+inf", "dropout": False, "total": False,
                                     "reason": "a wrapper of the bundled kernel that forwards neither"}


def bundled_lse_plus_inf_undeclared(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    return _bundled_plus_inf(q, k, v, causal, sm_scale, return_log_normalizer)


bundled_lse_plus_inf_undeclared.capabilities = {"dropout": False, "total": False,
                                                "reason": "a wrapper of the bundled kernel that forwards neither"}


def _bundled_plus_inf(q, k, v, causal, sm_scale, return_log_normalizer):
    from conformance.bundled.kernels import flash_attention

    result = flash_attention(q, k, v, causal=causal, sm_scale=sm_scale, return_log_normalizer=return_log_normalizer)
    if not return_log_normalizer:
        return result
    out, lse = result[0], result[1]
    return out, lse.masked_fill(lse == -math.inf, math.inf)


for _double in (lse_plus_inf, lse_plus_inf_undeclared, lse_zero, top_left, tf32, tf32_undeclared,
                bundled_lse_plus_inf, bundled_lse_plus_inf_undeclared):
    _double.capabilities = without_variants(getattr(_double, "capabilities", None))
