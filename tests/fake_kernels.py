"""Stand-in attention "kernels" in plain torch, for testing the harness itself.

Each has the bundled operator's signature and is selected with
`--kernel flash_attention=tests.fake_kernels:<name>`:

* exact     -- float64 maths, rounded once to the input dtype: passes every case.
* scale_off -- the softmax scale 1 % too large: a small but real error -> fail.
* raises    -- raises RuntimeError -> error.
* nan       -- one output element NaN -> nonfinite.
"""

from __future__ import annotations

import math

import torch


def _attention64(q, k, v, causal, sm_scale):
    """(out in float64, lse in float64) with autograd, GQA and bottom-right causal mask."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    k64, v64 = (t.repeat_interleave(group, dim=1) for t in (k64, v64))
    scores = (q64 @ k64.transpose(-1, -2)) * sm_scale
    seq_q, seq_k = q.shape[2], k.shape[2]
    visible = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril(diagonal=seq_k - seq_q)
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


def crashes(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Kills its process without a Python exception, like a segfaulting launch."""
    import os

    os._exit(3)
