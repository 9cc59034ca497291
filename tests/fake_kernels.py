"""Stand-in attention "kernels" in plain torch, for testing the harness itself.

Each has the bundled operator's signature and is selected with
`--kernel flash_attention=tests.fake_kernels:<name>`:

* exact     -- float64 maths, rounded once to the input dtype: passes every case.
* scale_off -- the softmax scale 1 % too large: a small but real error -> fail.
* raises    -- raises RuntimeError -> error.
* nan       -- one output element NaN -> nonfinite.
* nan_to_zero -- `exact` with NaN outputs replaced by 0: swallows a NaN input -> fail.
* segfaults_if_causal / hangs_if_causal -- `exact`, except that causal cases read
  address 0 (SIGSEGV) / never return: crash and hang isolation.
* causal_top_left -- the causal mask aligned top-left: wrong whenever Sq != Sk.
* nondeterministic -- `exact` with the last bit of one output element flipped on
  every second call: within the bound, but two launches differ.

None of them has FlashAttention-2's variants (no window_size, softcap or alibi_slopes
argument, no packed batches): each declares so (`without_variants`), so that such cases are
`unsupported` with that reason instead of an `error` for an unexpected keyword argument.
"""

from __future__ import annotations

import itertools
import math

import torch


VARIANT_KEYS = ("window", "softcap", "alibi", "varlen")
NO_VARIANTS_REASON = ("a test double without FlashAttention-2's variants (no window_size, softcap or "
                      "alibi_slopes argument, no packed batches)")


def without_variants(declared: dict | None = None) -> dict:
    """`declared` (a capabilities mapping) plus window, softcap, alibi and varlen = false, each
    with NO_VARIANTS_REASON."""
    declared = dict(declared or {})
    reasons = {**{key: NO_VARIANTS_REASON for key in VARIANT_KEYS}, **declared.get("reasons", {})}
    return {**declared, **{key: False for key in VARIANT_KEYS}, "reasons": reasons}


def _attention64(q, k, v, causal, sm_scale, diagonal=None):
    """(out in float64, lse in float64) with autograd, GQA and a causal mask aligned
    bottom-right (key j visible to query i iff j <= i + `diagonal`, default Sk - Sq)."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    k64, v64 = (t.repeat_interleave(group, dim=1) for t in (k64, v64))
    scores = (q64 @ k64.transpose(-1, -2)) * sm_scale
    seq_q, seq_k = q.shape[2], k.shape[2]
    visible = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril(diagonal=seq_k - seq_q if diagonal is None else diagonal)
    # A large finite fill keeps the softmax (and its gradient) finite on rows that see
    # no key; those rows are then zeroed explicitly.
    probabilities = scores.masked_fill(~visible, -1e300).softmax(dim=-1) * visible.any(dim=-1, keepdim=True)
    lse = scores.detach().masked_fill(~visible, -math.inf).logsumexp(dim=-1)
    return probabilities @ v64, lse


def exact(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Attention computed in float64 and rounded once to q's dtype (lse in float32)."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    out, lse = _attention64(q, k, v, causal, sm_scale)
    out = out.to(q.dtype)
    return (out, lse.to(torch.float32)) if return_log_normalizer else out


def scale_off(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Like `exact` but with the softmax scale 1 % off."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    return exact(q, k, v, causal, sm_scale * 1.01, return_log_normalizer)


def raises(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Always raises, like a kernel that fails to compile or launch."""
    raise RuntimeError("fake kernel failure: no launch configuration")


def nan(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Like `exact` but one output element is NaN (e.g. a never-written element)."""
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    out = result[0] if return_log_normalizer else result
    first = torch.zeros_like(out, dtype=torch.bool)
    first.view(-1)[0] = True
    out = out.masked_fill(first, math.nan)
    return (out, result[1]) if return_log_normalizer else out


def nan_to_zero(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Like `exact` but NaN outputs become 0, as a kernel that masks bad values would."""
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    if return_log_normalizer:
        return result[0].nan_to_num(0.0), result[1]
    return result.nan_to_num(0.0)


def crashes(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Kills its process without a Python exception, like a segfaulting launch."""
    import os

    os._exit(3)


def segfaults_if_causal(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact`, but a causal case dies of SIGSEGV, like a launch that faults the device."""
    if causal:
        import ctypes

        ctypes.string_at(0)
    return exact(q, k, v, causal, sm_scale, return_log_normalizer)


def hangs_if_causal(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact`, but a causal case never returns, like a kernel stuck in a loop."""
    if causal:
        import time

        while True:
            time.sleep(60)
    return exact(q, k, v, causal, sm_scale, return_log_normalizer)


def causal_top_left(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact`, but the causal mask is aligned top-left (j <= i), as some kernels do."""
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    out, lse = _attention64(q, k, v, causal, sm_scale, diagonal=0)
    out = out.to(q.dtype)
    return (out, lse.to(torch.float32)) if return_log_normalizer else out


_calls = itertools.count()


def nondeterministic(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact`, with the lowest bit of the first output element flipped on every second call."""
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    out = result[0] if return_log_normalizer else result
    if next(_calls) % 2 and out.numel():
        bits = {2: torch.int16, 4: torch.int32}[out.element_size()]
        out.view(bits).view(-1)[0] ^= 1
    return result


def one_extra_too_many(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact`, but with lse asked for it returns (out, lse, lse): neither convention."""
    result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    return (*result, result[1]) if return_log_normalizer else result


def wrong_shape(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """`exact` with the output's last row dropped."""
    return exact(q, k, v, causal, sm_scale)[..., :-1, :]


not_a_function = 42


for _double in (exact, scale_off, raises, nan, nan_to_zero, crashes, segfaults_if_causal, hangs_if_causal,
                causal_top_left, nondeterministic, one_extra_too_many, wrong_shape):
    _double.capabilities = without_variants()
