"""A FlagAttention-shaped test double around the bundled kernels.

It is the bundled `kernels.flash_attention` / `kernels.piecewise_attention`
underneath, with FlagAttention's edges on top, so the harness's ways of judging
another implementation (declared capabilities, the placeholder return convention,
the seed/offset dropout protocol) are exercised end to end without FlagAttention
and without a GPU:

* `flash_attention(q, k, v, causal, sm_scale, dropout_p, return_log_normalizer,
  return_total_attention, return_seed_offset)`: FlagAttention's signature and
  argument order; a plain `assert` on the head dim (16, 32, 64, 128); `out` alone when
  no extra output is asked for, else always five values (out, lse|None, total|None,
  seed|None, offset|None) -- FlagAttention's user guide: "when any auxiliary return
  flag is set the function returns five values, the fields not enabled are None";
  seed/offset only when dropout is active and asked for. It owns its dropout RNG: each
  call draws (seed, offset) from torch's default CPU generator and runs the bundled
  kernel with a dropout seed derived from them.
* `recompute_mask(batch, heads, seq_q, seq_k, p, seed, offset, device)`: the keep mask
  of such a call (the `--dropout-mask` function), from `kernels.dropout_keep_mask` and
  the same derivation.
* `piecewise_attention(q1, k1, q2, k2, v, dist_threshold, softmax_scale, causal)`: no
  GQA/MQA (asserts as many kv heads as query heads) and, like FlagAttention's piecewise
  kernel, head dims 16/32/64/128 only.

Declarations: the flash function carries a `capabilities` attribute; the piecewise one
is declared in tests/flag_double.toml (`--capabilities`), so both routes are used.

Import after `conformance.backends.activate()` (the kernels must see TRITON_INTERPRET).
"""

from __future__ import annotations

import torch

from conformance.bundled import kernels

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MASK64 = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / phi: spreads consecutive offsets over the seed space


def kernel_seed(seed: int, offset: int) -> int:
    """The bundled kernel's 64-bit dropout seed for FlagAttention-style Philox (seed, offset)."""
    return (int(seed) ^ (int(offset) * _GOLDEN)) & _MASK64


def draw_seed_offset() -> tuple[int, int]:
    """(seed, offset) from torch's default CPU generator (torch.manual_seed reproduces it);
    the offset is a multiple of 4, like a Philox counter advanced by whole 4-word blocks."""
    seed = int(torch.randint(0, 2**62, (), generator=torch.default_generator))
    offset = 4 * int(torch.randint(0, 2**30, (), generator=torch.default_generator))
    return seed, offset


def flash_attention(q, k, v, causal=False, sm_scale=None, dropout_p=0.0,
                    return_log_normalizer=False, return_total_attention=False, return_seed_offset=False):
    """FlagAttention's `flash_attention`, computed by the bundled kernel."""
    assert q.shape[-1] == k.shape[-1] == v.shape[-1]
    assert q.shape[-1] in HEAD_DIMS
    assert q.dtype in DTYPES
    dropout = dropout_p > 0
    seed, offset = draw_seed_offset() if dropout else (None, None)
    extras = dict(return_log_normalizer=return_log_normalizer, return_total_attention=return_total_attention)
    if dropout:
        extras.update(dropout_p=dropout_p, dropout_seed=kernel_seed(seed, offset))
    result = kernels.flash_attention(q, k, v, causal=causal, sm_scale=sm_scale, **extras)
    if not (return_log_normalizer or return_total_attention or return_seed_offset):
        return result
    out, *rest = result if isinstance(result, tuple) else (result,)
    lse = rest.pop(0) if return_log_normalizer else None
    total = rest.pop(0) if return_total_attention else None
    give_rng = dropout and return_seed_offset
    return out, lse, total, seed if give_rng else None, offset if give_rng else None


NO_VARIANTS = "FlagAttention's flash_attention has no window_size, softcap or alibi_slopes and no varlen form"
flash_attention.capabilities = {
    "dtypes": ["fp16", "bf16", "fp32"],
    "head_dims": list(HEAD_DIMS),
    "window": False, "softcap": False, "alibi": False, "varlen": False,
    "reasons": {
        "dtypes": "FlagAttention takes fp16, bf16 and fp32; no fp8",
        "head_dims": "FlagAttention's flash kernel asserts head_dim in (16, 32, 64, 128)",
        **{key: NO_VARIANTS for key in ("window", "softcap", "alibi", "varlen")},
    },
}


def recompute_mask(batch, heads, seq_q, seq_k, p, seed, offset, device) -> torch.Tensor:
    """The keep mask (batch, heads, seq_q, seq_k), True = kept, of a call that returned (seed, offset)."""
    mask = kernels.dropout_keep_mask(kernel_seed(seed, offset), p, batch, heads, seq_q, seq_k, device=device)
    return mask.reshape(batch, heads, seq_q, seq_k)


def piecewise_attention(q1, k1, q2, k2, v, dist_threshold, softmax_scale=None, causal=False):
    """FlagAttention's `piecewise_attention` (no GQA/MQA), computed by the bundled kernel."""
    assert q1.shape[-1] == k1.shape[-1] == q2.shape[-1] == k2.shape[-1] == v.shape[-1]
    assert q1.shape[-1] in HEAD_DIMS
    assert q1.shape[1] == k1.shape[1]
    return kernels.piecewise_attention(q1, k1, q2, k2, v, dist_threshold, softmax_scale=softmax_scale, causal=causal)
