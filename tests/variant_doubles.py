"""Plain-torch doubles of FlashAttention-2's attention variants, with the bundled operators'
API (window_size, softcap, alibi_slopes, and flash_attention_varlen), for testing the
harness before (and independently of) the Triton kernels:

    --kernel flash_attention=tests.variant_doubles:flash_attention
    --kernel flash_attention_varlen=tests.variant_doubles:flash_attention_varlen

Both compute in float64 with autograd (dense, per sequence) and round once to the input
dtype, so they pass every case. Their dropout mask is a hash of (seed, b * H + h, i, j),
exposed as `dropout_keep_mask` for the harness's replay (conformance.judging.dropout); the
varlen double draws sequence b's mask as the dense one draws batch b's.

Deliberately wrong doubles, each of which must fail where its fault shows:

* window_off_by_one       -- the window's left edge one key too far right (j > i + off - left)
* varlen_leaks_a_key      -- each sequence also attends to the first key after its own
* alibi_ignores_batch     -- (B, H) slopes read as slope[0, h] for every sequence
"""

from __future__ import annotations

import math

import torch

_MASK32 = 0xFFFFFFFF


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32), in int64 so that no product overflows."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def dropout_keep_mask(seed, p, batch, heads, seq_q, seq_k, *, device, batch_heads, rows, keys) -> torch.Tensor:
    """The keep mask of (b * H + h, i, j) in the given ranges: a pure function of those and seed."""
    arange = lambda span: torch.arange(span[0], span[1], device=device, dtype=torch.int64)
    bh = arange(batch_heads).view(-1, 1, 1)
    i = arange(rows).view(1, -1, 1)
    j = arange(keys).view(1, 1, -1)
    x = _mix(torch.full((), seed & _MASK32, dtype=torch.int64, device=device) + bh)
    x = _mix(x + i * 0x9E37)
    x = _mix(x + j)
    return x >= int(p * 2**32)


def _attention64(q, k, v, causal, sm_scale, window=None, softcap=None, slopes=None, keep=None, p_drop=0.0,
                 left_shift=0, sequence_index=0):
    """(out, lse) of one dense (B, H, Sq, D) problem in float64, differentiable. slopes (B, H) or
    None; keep (B, H, Sq, Sk) or None; left_shift moves the window's left edge (a fault)."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))
    k64, v64 = (t.repeat_interleave(group, dim=1) for t in (k64, v64))
    seq_q, seq_k = q.shape[2], k.shape[2]
    s = (q64 @ k64.transpose(-1, -2)) * sm_scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(seq_q, device=q.device)[:, None]
    j = torch.arange(seq_k, device=q.device)[None, :]
    relative = j - i - (seq_k - seq_q)
    if slopes is not None:
        s = s - slopes.to(torch.float64)[:, :, None, None] * relative.abs()
    visible = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device)
    if causal:
        visible &= relative <= 0
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= relative >= -left + left_shift
        if right >= 0:
            visible &= relative <= right
    # A large finite fill keeps the softmax (and its gradient) finite on rows that see no key;
    # those rows are then zeroed explicitly.
    p = s.masked_fill(~visible, -1e300).softmax(dim=-1) * visible.any(dim=-1, keepdim=True)
    lse = s.detach().masked_fill(~visible, -math.inf).logsumexp(dim=-1)
    if keep is not None:
        p = p * keep / (1.0 - p_drop)
    return p @ v64, lse


def _out_dtype(q):
    """The operator's output dtype: the input's, fp16 for 8-bit (fp8) inputs."""
    return torch.float16 if q.dtype.itemsize == 1 else q.dtype


def _scale(q, sm_scale):
    return 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale


def _slopes_of(alibi_slopes, batch, heads):
    return None if alibi_slopes is None else alibi_slopes.expand(batch, heads)


def _dense(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False, return_total_attention=False,
           dropout_p=0.0, dropout_seed=None, window_size=None, softcap=None, alibi_slopes=None, left_shift=0):
    if return_total_attention:
        raise NotImplementedError("the variant double has no total attention")
    batch, heads, seq_q, _ = q.shape
    keep = None
    if dropout_p:
        keep = dropout_keep_mask(dropout_seed, dropout_p, batch, heads, seq_q, k.shape[2], device=q.device,
                                 batch_heads=(0, batch * heads), rows=(0, seq_q), keys=(0, k.shape[2]))
        keep = keep.view(batch, heads, seq_q, k.shape[2])
    out, lse = _attention64(q, k, v, causal, _scale(q, sm_scale), window_size, softcap,
                            _slopes_of(alibi_slopes, batch, heads), keep, dropout_p, left_shift)
    out = out.to(_out_dtype(q))
    return (out, lse.to(torch.float32)) if return_log_normalizer else out


def flash_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                    return_total_attention=False, dropout_p=0.0, dropout_seed=None, window_size=None,
                    softcap=None, alibi_slopes=None):
    """Dense attention with FlashAttention-2's variants, float64 inside."""
    return _dense(q, k, v, causal, sm_scale, return_log_normalizer, return_total_attention, dropout_p,
                  dropout_seed, window_size, softcap, alibi_slopes)


def window_off_by_one(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                      return_total_attention=False, dropout_p=0.0, dropout_seed=None, window_size=None,
                      softcap=None, alibi_slopes=None):
    """`flash_attention` whose window drops its leftmost key."""
    return _dense(q, k, v, causal, sm_scale, return_log_normalizer, return_total_attention, dropout_p,
                  dropout_seed, window_size, softcap, alibi_slopes, left_shift=1)


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, sm_scale=None,
            return_log_normalizer=False, dropout_p=0.0, dropout_seed=None, window_size=None, softcap=None,
            alibi_slopes=None, leak=0):
    assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == torch.int32, "cu_seqlens must be int32"
    heads = q.shape[1]
    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    sequences = len(cu_q) - 1
    assert max(b - a for a, b in zip(cu_q, cu_q[1:])) <= max_seqlen_q
    slopes = _slopes_of(alibi_slopes, sequences, heads)
    outs, lses = [], []
    for b in range(sequences):
        qb = q[cu_q[b]:cu_q[b + 1]].transpose(0, 1).unsqueeze(0)
        kb, vb = (t[cu_k[b]:min(cu_k[b + 1] + leak, t.shape[0])].transpose(0, 1).unsqueeze(0) for t in (k, v))
        keep = None
        if dropout_p:
            keep = dropout_keep_mask(dropout_seed, dropout_p, sequences, heads, max_seqlen_q, max_seqlen_k,
                                     device=q.device, batch_heads=(b * heads, (b + 1) * heads),
                                     rows=(0, qb.shape[2]), keys=(0, kb.shape[2])).unsqueeze(0)
        row = None if slopes is None else slopes[b].unsqueeze(0)
        out, lse = _attention64(qb, kb, vb, causal, _scale(q, sm_scale), window_size, softcap, row, keep,
                                dropout_p)
        outs.append(out[0].transpose(0, 1))
        lses.append(lse[0])
    out = torch.cat(outs).to(q.dtype)
    lse = torch.cat(lses, dim=1).to(torch.float32)
    return (out, lse) if return_log_normalizer else out


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           sm_scale=None, return_log_normalizer=False, dropout_p=0.0, dropout_seed=None,
                           window_size=None, softcap=None, alibi_slopes=None):
    """Packed variable-length attention: each sequence its own dense problem (float64 inside)."""
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, sm_scale,
                   return_log_normalizer, dropout_p, dropout_seed, window_size, softcap, alibi_slopes)


def varlen_leaks_a_key(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                       sm_scale=None, return_log_normalizer=False, dropout_p=0.0, dropout_seed=None,
                       window_size=None, softcap=None, alibi_slopes=None):
    """`flash_attention_varlen` whose sequences also see the next sequence's first key."""
    return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, sm_scale,
                   return_log_normalizer, dropout_p, dropout_seed, window_size, softcap, alibi_slopes, leak=1)


def alibi_ignores_batch(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                        return_total_attention=False, dropout_p=0.0, dropout_seed=None, window_size=None,
                        softcap=None, alibi_slopes=None):
    """`flash_attention` that reads (B, H) slopes as batch 0's for every batch."""
    if alibi_slopes is not None and alibi_slopes.dim() == 2:
        alibi_slopes = alibi_slopes[0]
    return _dense(q, k, v, causal, sm_scale, return_log_normalizer, return_total_attention, dropout_p,
                  dropout_seed, window_size, softcap, alibi_slopes)


for _double in (flash_attention, window_off_by_one, alibi_ignores_batch, flash_attention_varlen,
                varlen_leaks_a_key):
    _double.dropout_keep_mask = dropout_keep_mask


def flash_without_variants(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                           return_total_attention=False, dropout_p=0.0, dropout_seed=None):
    """A kernel without FlashAttention-2's variants (no such keyword arguments at all), declaring so."""
    return _dense(q, k, v, causal, sm_scale, return_log_normalizer, return_total_attention, dropout_p, dropout_seed)


flash_without_variants.capabilities = {"window": False, "softcap": False, "alibi": False,
                                       "reason": "a kernel that predates FlashAttention-2's variants"}


def varlen_lse_plus_inf(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                        sm_scale=None, return_log_normalizer=False, dropout_p=0.0, dropout_seed=None,
                        window_size=None, softcap=None, alibi_slopes=None):
    """`flash_attention_varlen` with lse = +inf on rows that see no key (FlashAttention-2's CUDA
    kernels), declared."""
    result = _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, sm_scale,
                     return_log_normalizer, dropout_p, dropout_seed, window_size, softcap, alibi_slopes)
    if not return_log_normalizer:
        return result
    out, lse = result
    return out, lse.masked_fill(lse == -math.inf, math.inf)


varlen_lse_plus_inf.capabilities = {"lse_empty_rows": "+inf"}
varlen_lse_plus_inf.dropout_keep_mask = dropout_keep_mask
