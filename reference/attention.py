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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from .chunking import DEFAULT_MAX_CHUNK_BYTES, ChunkPlan, plan_chunks, spans
from .precision import REFERENCE, Precision
from .tf32 import ieee_fp32_matmul
from .validation import Dims, check_backward_args, check_options, check_qkv

Tensor = torch.Tensor


@dataclass(frozen=True)
class _Setup:
    """Everything a block computation needs besides its tensors."""

    dims: Dims
    scale: float
    causal: bool
    precision: Precision
    input_dtype: torch.dtype
    plan: ChunkPlan

    @property
    def acc(self) -> torch.dtype:
        return self.precision.accumulate_dtype

    @property
    def out_dtype(self) -> torch.dtype:
        return self.precision.output_dtype_for(self.input_dtype)

    def operand(self, x: Tensor) -> Tensor:
        return self.precision.as_operand(x, self.input_dtype)

    def rounded(self, x: Tensor) -> Tensor:
        return self.precision.round_intermediate(x, self.input_dtype)

    def key_end(self, row_stop: int) -> int:
        """Keys at or beyond this index are invisible to every row before ``row_stop``."""
        if not self.causal:
            return self.dims.sk
        return max(0, min(self.dims.sk, row_stop + self.dims.sk - self.dims.sq))


def _setup(q: Tensor, k: Tensor, v: Tensor, causal: bool, sm_scale: Optional[float],
           precision: Precision, max_chunk_bytes: int) -> _Setup:
    dims = check_qkv(q, k, v)
    scale = check_options(dims.head_dim, sm_scale, precision, max_chunk_bytes)
    elem_bytes = torch.finfo(precision.accumulate_dtype).bits // 8
    plan = plan_chunks(dims.units, dims.group, dims.sq, dims.sk, elem_bytes, max_chunk_bytes)
    return _Setup(dims, scale, bool(causal), precision, q.dtype, plan)


def _grouped(x: Tensor, dims: Dims) -> Tensor:
    """(B, H, S, ...) -> (U, G, S, ...): query heads grouped under their kv head."""
    return x.reshape(dims.units, dims.group, *x.shape[2:])


def _scores(st: _Setup, qb: Tensor, kb: Tensor, row_start: int) -> Tensor:
    """Scaled, masked scores for one block.

    qb (n, G, rows, D) and kb (n, Sk', D) in the accumulate dtype -> (n, G, rows, Sk') in the
    accumulate dtype; invisible keys are -inf. The scale multiplies the accumulated product, as a
    kernel scales its fp32 ``dot`` result.
    """
    n, g, rows, d = qb.shape
    s = torch.matmul(qb.reshape(n, g * rows, d), kb.mT).mul_(st.scale)
    s = s.view(n, g, rows, kb.shape[1])
    if st.causal:
        rows_idx = torch.arange(row_start, row_start + rows, device=qb.device)
        cols_idx = torch.arange(kb.shape[1], device=qb.device)
        visible = cols_idx[None, :] <= rows_idx[:, None] + (st.dims.sk - st.dims.sq)
        s.masked_fill_(~visible, float("-inf"))
    return s


def _probabilities(s: Tensor, lse: Tensor) -> Tensor:
    """P = exp(S - lse) in place on ``s``. Rows with lse = -inf (no visible key) give 0, not NaN."""
    finite_lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return s.sub_(finite_lse.unsqueeze(-1)).exp_()


def _forward_block(st: _Setup, qb: Tensor, kb: Tensor, vb: Tensor,
                   row_start: int) -> Tuple[Tensor, Tensor]:
    """One block of the forward: qb (n, G, rows, D) -> out (n, G, rows, D), lse (n, G, rows).

    Both in the accumulate dtype; P is rounded per the precision before P @ V.
    """
    n, g, rows, d = qb.shape
    s = _scores(st, qb, kb, row_start)
    lse = torch.logsumexp(s, dim=-1)
    p = _probabilities(s, lse)
    out = torch.matmul(st.rounded(p).view(n, g * rows, -1), vb)
    return out.view(n, g, rows, d), lse


@torch.no_grad()
def attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    sm_scale: Optional[float] = None,
    precision: Precision = REFERENCE,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> Tuple[Tensor, Tensor]:
    """softmax(sm_scale * q k^T) v, computed in blocks at the given precision.

    Args:
        q: (B, H, Sq, D). k, v: (B, Hkv, Sk, D) with H % Hkv == 0. Any strides; same dtype/device.
        causal: bottom-right aligned causal mask.
        sm_scale: defaults to 1 / sqrt(D).
        precision: REFERENCE (float64 throughout) or MATCHED (what a fused kernel does).
        max_chunk_bytes: budget for the score-sized temporaries of one block.

    Returns:
        out (B, H, Sq, D) in ``precision``'s output dtype (float64 for REFERENCE, the input
        dtype for MATCHED) and lse (B, H, Sq), the natural-log softmax normaliser, in its
        accumulate dtype (float64 resp. float32).
    """
    st = _setup(q, k, v, causal, sm_scale, precision, max_chunk_bytes)
    dims = st.dims
    qg = _grouped(q, dims)
    kg = k.reshape(dims.units, dims.sk, dims.head_dim)
    vg = v.reshape(dims.units, dims.sk, dims.head_dim)
    out = torch.empty(qg.shape, dtype=st.out_dtype, device=q.device)
    lse = torch.empty(qg.shape[:3], dtype=st.acc, device=q.device)
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb, vb = st.operand(kg[u0:u1]), st.operand(vg[u0:u1])
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                qb = st.operand(qg[u0:u1, :, r0:r1])
                o, l = _forward_block(st, qb, kb[:, :e], vb[:, :e], r0)
                out[u0:u1, :, r0:r1] = o
                lse[u0:u1, :, r0:r1] = l
    return out.view(q.shape), lse.view(q.shape[:3])


def _backward_block(st: _Setup, blk: Tuple[Tensor, ...], kb: Tensor, vb: Tensor,
                    dk_acc: Tensor, dv_acc: Tensor, row_start: int) -> Tensor:
    """One block of a FlashAttention-2 style backward; returns dq (n, G, rows, D), unrounded.

    ``blk`` = (q, out, do) as (n, G, rows, D) and lse (n, G, rows), all in the accumulate dtype.
    kb, vb (n, Sk', D). dK (without sm_scale) and dV are added into dk_acc, dv_acc (n, Sk', D)
    in the accumulate dtype, which sums over the G query heads of the unit and over row blocks.
    """
    qb, ob, dob, lse = blk
    n, g, rows, d = qb.shape
    m = g * rows
    q2, do2 = qb.reshape(n, m, d), dob.reshape(n, m, d)
    delta = (dob * ob).sum(dim=-1, keepdim=True)
    p = _probabilities(_scores(st, qb, kb, row_start), lse)
    dv_acc += torch.matmul(st.rounded(p).view(n, m, -1).mT, do2)
    ds = torch.matmul(do2, vb.mT).view(p.shape).sub_(delta).mul_(p)
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
) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients of attention_forward w.r.t. q, k, v, computed in blocks at the given precision.

    Args:
        q, k, v, causal, sm_scale, precision, max_chunk_bytes: as for ``attention_forward``.
        out: (B, H, Sq, D) and lse: (B, H, Sq) from ``attention_forward`` at the same precision
            (the forward is not recomputed; P is rebuilt from lse as a FlashAttention-2 backward
            does). do: (B, H, Sq, D), the gradient of out.

    Returns:
        dq (B, H, Sq, D), dk and dv (B, Hkv, Sk, D) in ``precision``'s output dtype. For GQA, dk
        and dv sum the contributions of every query head in the group. dK/dV accumulate over
        query blocks in the accumulate dtype and are rounded once at the end.
    """
    st = _setup(q, k, v, causal, sm_scale, precision, max_chunk_bytes)
    check_backward_args(q, out, do, lse)
    dims = st.dims
    qg, og, dog, lg = (_grouped(x, dims) for x in (q, out, do, lse))
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
                e = st.key_end(r1)
                blk = tuple(st.operand(x[u0:u1, :, r0:r1]) for x in (qg, og, dog))
                blk += (lg[u0:u1, :, r0:r1].to(st.acc),)
                dq[u0:u1, :, r0:r1] = _backward_block(
                    st, blk, kb[:, :e], vb[:, :e], dk_acc[:, :e], dv_acc[:, :e], r0)
            dk[u0:u1] = dk_acc.mul_(st.scale)
            dv[u0:u1] = dv_acc
    return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)
