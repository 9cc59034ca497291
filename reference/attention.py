"""Chunked, memory-bounded attention forward and backward at a declared :class:`Precision`.

Layout used inside: q, out, do are viewed as (U, G, Sq, D) and k, v as (U, Sk, D), where
U = B * Hkv (batch, kv head) units and G = H // Hkv query heads per kv head. Query head h uses kv
head h // G, which is exactly what this grouping of the H axis gives; a unit's G*rows query rows
go through one batched matmul against its kv head, so K and V are never repeated.

Blocks are a range of units times a range of query rows, against all (visible) keys; see
``reference.chunking``. The full Sq x Sk score matrix is never built.

Causal masking is bottom-right aligned (FlashAttention-2 >= 2.1): key j is visible to query i iff
j <= i + (Sk - Sq). A query with no visible key gets out = 0, lse = -inf and contributes nothing
to any gradient.

Dropout (``reference.Dropout``) replays a given keep mask Z, fetched chunk by chunk: out =
c (Z * P) V with c = 1 / (1 - p); lse and the total attention stay those of the un-dropped P.
As in the kernel, P is masked (exactly) before it is rounded for P @ V, and c multiplies the
accumulated product, not each weight.

FlashAttention-2's variants -- sliding window, softcap, ALiBi, per-sequence lengths of a padded
variable-length batch -- change the scores and the masks of each block (``reference.variants``);
a block then only visits the keys some of its rows may see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from .blocks import BlockSetup, grouped, probabilities, softmax_values
from .chunking import DEFAULT_MAX_CHUNK_BYTES, plan_chunks, spans
from .dropout import Dropout
from .precision import REFERENCE, Precision
from .tf32 import ieee_fp32_matmul
from .validation import check_backward_args, check_dropout, check_options, check_qkv
from .variants import NONE, Variants, apply_variants, check_variants, key_span

Tensor = torch.Tensor


@dataclass(frozen=True)
class _Setup(BlockSetup):
    """A block setup that may replay dropout and apply FlashAttention-2's variants."""

    dropout: Optional[Dropout] = None
    variants: Variants = NONE

    def keep(self, units: Tuple[int, int], rows: Tuple[int, int], keys: Tuple[int, int],
             device: torch.device) -> Optional[Tensor]:
        """The dropout keep mask of a block as (n, G, rows, keys), or None without dropout.

        Units u0:u1 hold the query heads b * H + h in [u0 * G, u1 * G): a contiguous range."""
        if self.dropout is None:
            return None
        g = self.dims.group
        mask = self.dropout.chunk((units[0] * g, units[1] * g), rows, keys, device)
        return mask.view(units[1] - units[0], g, rows[1] - rows[0], keys[1] - keys[0])

    def key_span(self, rows: Tuple[int, int]) -> Tuple[int, int]:
        """Keys [first, stop) that some row of ``rows`` may see (reference.variants.key_span)."""
        return key_span(self.variants, self.dims, self.causal, self.top_left, rows)


def _setup(q: Tensor, k: Tensor, v: Tensor, causal: bool, sm_scale: Optional[float],
           precision: Precision, max_chunk_bytes: int, dropout: Optional[Dropout],
           variant_args: Optional[dict] = None) -> _Setup:
    """``variant_args``: window, softcap, alibi_slopes and seq_lens as the public functions take them."""
    dims = check_qkv(q, k, v)
    scale = check_options(dims.head_dim, sm_scale, precision, max_chunk_bytes)
    check_dropout(dropout)
    variants = check_variants(dims, q.device, precision.accumulate_dtype, **(variant_args or {}))
    elem_bytes = torch.finfo(precision.accumulate_dtype).bits // 8
    # Variants add score-sized temporaries: the relative key positions (int64) and the ALiBi
    # bias or the softcap's derivative.
    extra = 2 if variants.active else 0
    plan = plan_chunks(dims.units, dims.group, dims.sq, dims.sk, elem_bytes, max_chunk_bytes, extra)
    if causal not in (False, True, "bottom_right", "top_left"):
        raise ValueError(f"causal: expected False, True, 'bottom_right' or 'top_left', got {causal!r}")
    top_left = causal == "top_left"
    return _Setup(dims, scale, bool(causal), precision, q.dtype, plan, top_left=top_left, dropout=dropout,
                  variants=variants)


def _scores(st: _Setup, qb: Tensor, kb: Tensor, origin: Tuple[int, int, int],
            want_derivative: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Scaled, masked scores for one block, and the softcap's derivative if asked for.

    qb (n, G, rows, D) and kb (n, keys, D) in the accumulate dtype -> (n, G, rows, keys) in the
    accumulate dtype; invisible keys are -inf. ``origin``: the block's first unit, query row and
    key. The scale multiplies the accumulated product, as a kernel scales its fp32 ``dot`` result;
    softcap, ALiBi and the masks follow (reference.variants).
    """
    n, g, rows, d = qb.shape
    s = torch.matmul(qb.reshape(n, g * rows, d), kb.mT).mul_(st.scale)
    s = s.view(n, g, rows, kb.shape[1])
    derivative = apply_variants(st.variants, st.dims, st.causal, st.top_left, s, origin, want_derivative)
    return s, derivative


def _forward_block(st: _Setup, qb: Tensor, kb: Tensor, vb: Tensor, origin: Tuple[int, int, int],
                   keep: Optional[Tensor], want_total: bool) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """One block of the forward: qb (n, G, rows, D) -> out (n, G, rows, D), lse (n, G, rows)
    and, if ``want_total``, the column sums of P (n, G, keys), all in the accumulate dtype."""
    s, _ = _scores(st, qb, kb, origin)
    lse = torch.logsumexp(s, dim=-1)
    # The total attention kernel rebuilds P from lse, as the backward does.
    column_sums = probabilities(s.clone(), lse).sum(dim=-2) if want_total else None
    keep_scale = st.dropout.keep_scale if keep is not None else 1.0
    return softmax_values(st, s, vb, keep, keep_scale), lse, column_sums


@torch.no_grad()
def attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    sm_scale: Optional[float] = None,
    precision: Precision = REFERENCE,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    dropout: Optional[Dropout] = None,
    return_total: bool = False,
    window: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[Tensor] = None,
    seq_lens: Optional[Tuple[Sequence[int], Sequence[int]]] = None,
) -> Tuple[Tensor, ...]:
    """softmax(sm_scale * q k^T) v, computed in blocks at the given precision.

    Args:
        q: (B, H, Sq, D). k, v: (B, Hkv, Sk, D) with H % Hkv == 0. Any strides; same dtype/device.
        causal: False; True or "bottom_right" for the bottom-right aligned causal mask (key j
            visible to query i iff j <= i + Sk - Sq); "top_left" for j <= i (torch SDPA's
            ``is_causal``), judged when a kernel declares it.
        sm_scale: defaults to 1 / sqrt(D).
        precision: REFERENCE (float64 throughout) or MATCHED (what a fused kernel does).
        max_chunk_bytes: budget for the score-sized temporaries of one block.
        dropout: a ``reference.Dropout`` whose keep mask is replayed, or None.
        return_total: also return the total attention sum_i P_ij.
        window, softcap, alibi_slopes, seq_lens: FlashAttention-2's variants (reference.variants):
            window (left, right) with -1 for an unbounded side; softcap c > 0; ALiBi slopes (H,)
            or (B, H); per-batch (query lengths, key lengths) of a padded variable-length batch,
            whose padding rows come out as rows that see no key.

    Returns:
        out (B, H, Sq, D) in ``precision``'s output dtype (float64 for REFERENCE, the input
        dtype for MATCHED) and lse (B, H, Sq), the natural-log softmax normaliser (of the
        un-dropped weights), in its accumulate dtype (float64 resp. float32); with
        ``return_total`` also total (B, H, Sk) = the normalised, un-dropped weights summed over
        the queries, in the accumulate dtype (rows that see no key add 0).
    """
    variant_args = dict(window=window, softcap=softcap, alibi_slopes=alibi_slopes, seq_lens=seq_lens)
    st = _setup(q, k, v, causal, sm_scale, precision, max_chunk_bytes, dropout, variant_args)
    dims = st.dims
    qg = grouped(q, dims)
    kg = k.reshape(dims.units, dims.sk, dims.head_dim)
    vg = v.reshape(dims.units, dims.sk, dims.head_dim)
    out = torch.empty(qg.shape, dtype=st.out_dtype, device=q.device)
    lse = torch.empty(qg.shape[:3], dtype=st.acc, device=q.device)
    # Column sums accumulate over row blocks in the accumulate dtype (fp32 in MATCHED, as
    # the kernel's), un-rounded: the kernel never rounds P for them.
    total = torch.zeros((dims.units, dims.group, dims.sk), dtype=st.acc, device=q.device)
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb, vb = st.operand(kg[u0:u1]), st.operand(vg[u0:u1])
            for r0, r1 in spans(dims.sq, st.plan.rows):
                k0, k1 = st.key_span((r0, r1))
                qb = st.operand(qg[u0:u1, :, r0:r1])
                keep = st.keep((u0, u1), (r0, r1), (k0, k1), q.device)
                o, l, cols = _forward_block(st, qb, kb[:, k0:k1], vb[:, k0:k1], (u0, r0, k0), keep, return_total)
                out[u0:u1, :, r0:r1] = o
                lse[u0:u1, :, r0:r1] = l
                if return_total:
                    total[u0:u1, :, k0:k1] += cols
    result = (out.view(q.shape), lse.view(q.shape[:3]))
    return result + (total.view(*q.shape[:2], dims.sk),) if return_total else result


def _backward_block(st: _Setup, blk: Tuple[Tensor, ...], kb: Tensor, vb: Tensor,
                    dk_acc: Tensor, dv_acc: Tensor, origin: Tuple[int, int, int]) -> Tensor:
    """One block of a FlashAttention-2 style backward; returns dq (n, G, rows, D), unrounded.

    ``blk`` = (q, out, do) as (n, G, rows, D), lse (n, G, rows), all in the accumulate dtype,
    and the keep mask (n, G, rows, Sk') or None. kb, vb (n, Sk', D). dK (without sm_scale) and
    dV (without the keep scale) are added into dk_acc, dv_acc (n, Sk', D) in the accumulate
    dtype, which sums over the G query heads of the unit and over row blocks.

    With dropout, dP = c Z (dO V^T) and dV += (Z P)^T dO; delta = rowsum(dO * O) is unchanged.
    With softcap, dS carries the cap's derivative 1 - tanh^2 (reference.variants).
    """
    qb, ob, dob, lse, keep = blk
    n, g, rows, d = qb.shape
    m = g * rows
    q2, do2 = qb.reshape(n, m, d), dob.reshape(n, m, d)
    delta = (dob * ob).sum(dim=-1, keepdim=True)
    s, cap_derivative = _scores(st, qb, kb, origin, want_derivative=True)
    p = probabilities(s, lse)
    dp = torch.matmul(do2, vb.mT).view(p.shape)
    if keep is not None:
        dp.mul_(keep).mul_(st.dropout.keep_scale)
    ds = dp.sub_(delta).mul_(p)
    if cap_derivative is not None:
        ds.mul_(cap_derivative)
        del cap_derivative
    if keep is not None:
        p.mul_(keep)  # P as it entered P @ V; in place, as the unmasked P is no longer needed
    dv_acc += torch.matmul(st.rounded(p).view(n, m, -1).mT, do2)
    del p
    ds = st.rounded(ds).view(n, m, -1)
    dk_acc += torch.matmul(ds.mT, q2)
    return torch.matmul(ds, kb).mul_(st.scale).view(n, g, rows, d)


@torch.no_grad()
def attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    do: Tensor,
    lse: Tensor,
    causal: bool = False,
    sm_scale: Optional[float] = None,
    precision: Precision = REFERENCE,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    dropout: Optional[Dropout] = None,
    window: Optional[Tuple[int, int]] = None,
    softcap: Optional[float] = None,
    alibi_slopes: Optional[Tensor] = None,
    seq_lens: Optional[Tuple[Sequence[int], Sequence[int]]] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients of attention_forward w.r.t. q, k, v, computed in blocks at the given precision.

    Args:
        q, k, v, causal, sm_scale, precision, max_chunk_bytes, dropout, window, softcap,
            alibi_slopes, seq_lens: as for ``attention_forward`` (the same dropout mask and
            variants as the forward that gave ``out``).
        out: (B, H, Sq, D) and lse: (B, H, Sq) from ``attention_forward`` at the same precision
            (the forward is not recomputed; P is rebuilt from lse as a FlashAttention-2 backward
            does). do: (B, H, Sq, D), the gradient of out.

    Returns:
        dq (B, H, Sq, D), dk and dv (B, Hkv, Sk, D) in ``precision``'s output dtype. For GQA, dk
        and dv sum the contributions of every query head in the group. dK/dV accumulate over
        query blocks in the accumulate dtype and are rounded once at the end.
    """
    variant_args = dict(window=window, softcap=softcap, alibi_slopes=alibi_slopes, seq_lens=seq_lens)
    st = _setup(q, k, v, causal, sm_scale, precision, max_chunk_bytes, dropout, variant_args)
    check_backward_args(q, out, do, lse)
    dims = st.dims
    qg, og, dog, lg = (grouped(x, dims) for x in (q, out, do, lse))
    kg = k.reshape(dims.units, dims.sk, dims.head_dim)
    vg = v.reshape(dims.units, dims.sk, dims.head_dim)
    dq = torch.empty(qg.shape, dtype=st.out_dtype, device=q.device)
    dk = torch.empty(kg.shape, dtype=st.out_dtype, device=q.device)
    dv = torch.empty(vg.shape, dtype=st.out_dtype, device=q.device)
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb, vb = st.operand(kg[u0:u1]), st.operand(vg[u0:u1])
            dk_acc = torch.zeros(kb.shape, dtype=st.acc, device=q.device)
            dv_acc = torch.zeros(vb.shape, dtype=st.acc, device=q.device)
            for r0, r1 in spans(dims.sq, st.plan.rows):
                k0, k1 = st.key_span((r0, r1))
                blk = tuple(st.operand(x[u0:u1, :, r0:r1]) for x in (qg, og, dog))
                blk += (lg[u0:u1, :, r0:r1].to(st.acc), st.keep((u0, u1), (r0, r1), (k0, k1), q.device))
                dq[u0:u1, :, r0:r1] = _backward_block(
                    st, blk, kb[:, k0:k1], vb[:, k0:k1], dk_acc[:, k0:k1], dv_acc[:, k0:k1], (u0, r0, k0))
            dk[u0:u1] = dk_acc.mul_(st.scale)
            dv[u0:u1] = dv_acc.mul_(st.dropout.keep_scale) if st.dropout is not None else dv_acc
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)
