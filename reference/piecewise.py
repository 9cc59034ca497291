"""Chunked piecewise (NLPE) attention forward and backward at a declared :class:`Precision`.

The score of (query i, key j) is q2_i . k2_j when pos(i) - j >= dist_threshold ("far") and
q1_i . k1_j otherwise ("near"), times sm_scale, with pos(i) = i + Sk - Sq: queries aligned to the end
of the keys, as the bottom-right causal mask is (key j visible iff j <= pos(i)). The distance is
signed, as FlagAttention's is: keys after pos(i) are always near, causal or not. Rows with no visible
key get out = 0, lse = -inf and contribute nothing to any gradient.

The algorithm and its layout follow ``reference.attention`` (units of (batch, kv head) with their
G query heads, blocks of units x query rows against the visible keys, planned by
``reference.chunking``). At MATCHED precision the mixed score matrix is selected from the two
fp32-accumulated products, as the kernel does; selection is exact, so this adds no rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from .blocks import BlockSetup, grouped, probabilities, softmax_values, units
from .chunking import DEFAULT_MAX_CHUNK_BYTES, plan_chunks, spans
from .precision import REFERENCE, Precision
from .tf32 import ieee_fp32_matmul
from .validation import check_backward_args, check_dist_threshold, check_options, check_qkv

Tensor = torch.Tensor


@dataclass(frozen=True)
class _Setup(BlockSetup):
    """A block setup with the near/far distance threshold."""

    threshold: int = 0


def _check_pair(name: str, x: Tensor, like_name: str, like: Tensor) -> None:
    """q2 must be shaped, typed and placed like q1 (k2 like k1)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    for what in ("shape", "dtype", "device"):
        if getattr(x, what) != getattr(like, what):
            raise ValueError(f"{name} {what} {getattr(x, what)} does not match "
                             f"{like_name} {what} {getattr(like, what)}")


def _setup(qk: Tuple[Tensor, ...], v: Tensor, dist_threshold: int, causal: bool,
           sm_scale: Optional[float], precision: Precision, max_chunk_bytes: int) -> _Setup:
    q1, k1, q2, k2 = qk
    if causal not in (False, True, "bottom_right"):
        raise ValueError(f"causal: piecewise_attention's mask and distance are bottom-right aligned "
                         f"(False, True or 'bottom_right'), got {causal!r}")
    dims = check_qkv(q1, k1, v)
    _check_pair("q2", q2, "q1", q1)
    _check_pair("k2", k2, "k1", k1)
    threshold = check_dist_threshold(dist_threshold)
    scale = check_options(dims.head_dim, sm_scale, precision, max_chunk_bytes)
    # About twice attention's score-sized temporaries are alive at once (two products and
    # their selection; the near and far halves of dS), so plan as if elements were twice as big.
    elem_bytes = 2 * torch.finfo(precision.accumulate_dtype).bits // 8
    plan = plan_chunks(dims.units, dims.group, dims.sq, dims.sk, elem_bytes, max_chunk_bytes)
    return _Setup(dims, scale, bool(causal), precision, q1.dtype, plan, threshold=threshold)


def _product(qb: Tensor, kb: Tensor) -> Tensor:
    """qb (n, G, rows, D) @ kb (n, Sk', D)^T -> (n, G, rows, Sk'), accumulated in their dtype."""
    n, g, rows, d = qb.shape
    return torch.matmul(qb.reshape(n, g * rows, d), kb.mT).view(n, g, rows, kb.shape[1])


def _near(st: _Setup, row_start: int, rows: int, keys: int, device) -> Tensor:
    """(rows, keys) mask of the pairs scored with q1 . k1."""
    pos = torch.arange(row_start, row_start + rows, device=device) + (st.dims.sk - st.dims.sq)
    cols = torch.arange(keys, device=device)
    return pos[:, None] - cols[None, :] < st.threshold


def _scores(st: _Setup, qb: Tuple[Tensor, Tensor], kb: Tuple[Tensor, Tensor],
            row_start: int) -> Tuple[Tensor, Tensor]:
    """Scaled, masked piecewise scores (n, G, rows, Sk') and the near mask (rows, Sk').

    The selection is made on the accumulated products and then scaled, as a kernel scales
    its selected fp32 ``dot`` results; invisible keys are -inf."""
    rows, keys = qb[0].shape[2], kb[0].shape[1]
    near = _near(st, row_start, rows, keys, qb[0].device)
    s = torch.where(near, _product(qb[0], kb[0]), _product(qb[1], kb[1])).mul_(st.scale)
    if st.causal:
        pos = torch.arange(row_start, row_start + rows, device=s.device) + (st.dims.sk - st.dims.sq)
        visible = torch.arange(keys, device=s.device)[None, :] <= pos[:, None]
        s.masked_fill_(~visible, float("-inf"))
    return s, near


def _forward_block(st: _Setup, qb, kb, vb: Tensor, row_start: int) -> Tuple[Tensor, Tensor]:
    """qb = (q1, q2) blocks (n, G, rows, D), kb = (k1, k2) and vb (n, Sk', D) -> out, lse."""
    s, _ = _scores(st, qb, kb, row_start)
    lse = torch.logsumexp(s, dim=-1)
    return softmax_values(st, s, vb), lse


@torch.no_grad()
def piecewise_forward(q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, v: Tensor,
                      dist_threshold: int, causal: bool = False, sm_scale: Optional[float] = None,
                      precision: Precision = REFERENCE,
                      max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> Tuple[Tensor, Tensor]:
    """Piecewise attention out (B, H, Sq, D) and lse (B, H, Sq), computed in blocks.

    q1, q2: (B, H, Sq, D); k1, k2, v: (B, Hkv, Sk, D), H % Hkv == 0, any strides. Other
    arguments and the output dtypes are those of ``reference.attention_forward``.
    """
    st = _setup((q1, k1, q2, k2), v, dist_threshold, causal, sm_scale, precision, max_chunk_bytes)
    dims = st.dims
    qg = [grouped(q, dims) for q in (q1, q2)]
    kg = [units(k, dims) for k in (k1, k2, v)]
    out = torch.empty(qg[0].shape, dtype=st.out_dtype, device=q1.device)
    lse = torch.empty(qg[0].shape[:3], dtype=st.acc, device=q1.device)
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            k1b, k2b, vb = (st.operand(k[u0:u1]) for k in kg)
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                qb = tuple(st.operand(q[u0:u1, :, r0:r1]) for q in qg)
                o, l = _forward_block(st, qb, (k1b[:, :e], k2b[:, :e]), vb[:, :e], r0)
                out[u0:u1, :, r0:r1] = o
                lse[u0:u1, :, r0:r1] = l
    return out.view(q1.shape), lse.view(q1.shape[:3])


def _backward_block(st: _Setup, blk, kb, vb: Tensor, acc, row_start: int) -> Tuple[Tensor, Tensor]:
    """One block of the backward; returns (dq1, dq2) (n, G, rows, D), unrounded.

    blk = (q1, q2, out, do) blocks (n, G, rows, D) and lse (n, G, rows); kb = (k1, k2) and vb
    (n, Sk', D). dK1, dK2 (without sm_scale) and dV are added into acc = (dk1, dk2, dv)."""
    q1b, q2b, ob, dob, lse = blk
    n, g, rows, d = q1b.shape

    def flat(x: Tensor) -> Tensor:  # (n, G, rows, X) -> (n, G * rows, X)
        return x.reshape(n, g * rows, -1)

    delta = (dob * ob).sum(dim=-1, keepdim=True)
    s, near = _scores(st, (q1b, q2b), kb, row_start)
    p = probabilities(s, lse)
    acc[2].add_(torch.matmul(flat(st.rounded(p)).mT, flat(dob)))
    ds = torch.matmul(flat(dob), vb.mT).view(p.shape).sub_(delta).mul_(p)
    del p, s
    ds = st.rounded(ds)
    ds_far = ds.masked_fill(near, 0.0)
    ds_near = ds.masked_fill_(~near, 0.0)
    dq = []
    for part, qb, kb_, dk_acc in ((ds_near, q1b, kb[0], acc[0]), (ds_far, q2b, kb[1], acc[1])):
        dk_acc.add_(torch.matmul(flat(part).mT, flat(qb)))
        dq.append(torch.matmul(flat(part), kb_).mul_(st.scale).view(n, g, rows, d))
    return dq[0], dq[1]


@torch.no_grad()
def piecewise_backward(q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, v: Tensor, out: Tensor,
                       do: Tensor, lse: Tensor, dist_threshold: int, causal: bool = False,
                       sm_scale: Optional[float] = None, precision: Precision = REFERENCE,
                       max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> Tuple[Tensor, ...]:
    """Gradients (dq1, dk1, dq2, dk2, dv) of piecewise_forward, computed in blocks.

    out and lse come from ``piecewise_forward`` at the same precision (P is rebuilt from lse);
    do (B, H, Sq, D) is the gradient of out. For GQA, dk1, dk2 and dv sum over the query heads
    of the group; they accumulate over query blocks in the accumulate dtype and are rounded once.
    """
    st = _setup((q1, k1, q2, k2), v, dist_threshold, causal, sm_scale, precision, max_chunk_bytes)
    check_backward_args(q1, out, do, lse)
    dims = st.dims
    qg = [grouped(x, dims) for x in (q1, q2, out, do)]
    lg = grouped(lse, dims)
    kg = [units(x, dims) for x in (k1, k2, v)]
    dq = [torch.empty(qg[0].shape, dtype=st.out_dtype, device=q1.device) for _ in range(2)]
    dk = [torch.empty(kg[0].shape, dtype=st.out_dtype, device=q1.device) for _ in range(3)]
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            k1b, k2b, vb = (st.operand(x[u0:u1]) for x in kg)
            acc = [torch.zeros(vb.shape, dtype=st.acc, device=q1.device) for _ in range(3)]
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                blk = tuple(st.operand(x[u0:u1, :, r0:r1]) for x in qg)
                blk += (lg[u0:u1, :, r0:r1].to(st.acc),)
                dq1, dq2 = _backward_block(st, blk, (k1b[:, :e], k2b[:, :e]), vb[:, :e],
                                           [a[:, :e] for a in acc], r0)
                dq[0][u0:u1, :, r0:r1] = dq1
                dq[1][u0:u1, :, r0:r1] = dq2
            dk[0][u0:u1] = acc[0].mul_(st.scale)
            dk[1][u0:u1] = acc[1].mul_(st.scale)
            dk[2][u0:u1] = acc[2]
    return (dq[0].view(q1.shape), dk[0].view(k1.shape), dq[1].view(q1.shape),
            dk[1].view(k1.shape), dk[2].view(v.shape))
