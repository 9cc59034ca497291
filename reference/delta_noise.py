"""How far dQ and dK move when the stored output O is rounded to its dtype: the size of the
rounding noise every FlashAttention-2 style backward carries through delta.

A FlashAttention-2 backward (the bundled kernels, the same-precision torch path, FA2
itself) computes delta_i = sum_d dO_id O_id from the output O *as stored*, i.e. rounded
to the input dtype: each O_id carries an error e_id with |e_id| <= u |O_id| (u the unit
roundoff of that dtype). Through dS_ij = P_ij (dP_ij - delta_i) the error of delta_i,
sum_d dO_id e_id, reaches

    dQ_id = scale * sum_j dS_ij K_jd        and        dK_jd = scale * sum_i dS_ij Q_id.

The errors e_id are the roundings of different numbers: independent, not aligned, each
uniform in [-u |O_id|, u |O_id|], of standard deviation u |O_id| / sqrt(3). So the noise
is taken as the standard deviation of its propagation (the random-walk size, not the
worst case):

    noise(delta_i) = u * s_i,        s_i = sqrt(sum_d (dO_id O_id)^2 / 3)   (over the O_id
                                     that the dtype cannot hold: the rest are stored exactly)
    noise(dQ_id)   = u * scale * s_i * sqrt(sum_j P_ij^2 K_jd^2)
    noise(dK_jd)   = u * scale * sqrt(sum_i P_ij^2 Q_id^2 s_i^2)     (i over the rows of
                                                                      every query head of the group)

This module returns the sizes without u (the rule multiplies by the unit roundoff of the
tensor's dtype), in float64, as the maxima over each tensor. They are small next to the
result where the softmax is spread (O is an average, much smaller than V); they matter
where it is peaked (large logits: O ~ one V row, and dP_ij - delta_i cancels), which is
where two correct implementations that round O differently part by several ulps of dK.
dV = P^T dO does not use delta. With dropout, dS_ij = P_ij (c Z_ij dP_ij - delta_i): the
coefficient of delta is the un-dropped P, so the keep mask does not enter.
"""

from __future__ import annotations

from typing import Optional

import torch

from .attention import _scores as _attention_scores
from .attention import _setup as _attention_setup
from .blocks import grouped, probabilities, units
from .chunking import DEFAULT_MAX_CHUNK_BYTES, spans
from .piecewise import _scores as _piecewise_scores
from .piecewise import _setup as _piecewise_setup
from .precision import REFERENCE
from .tf32 import ieee_fp32_matmul

Tensor = torch.Tensor


def _row_sizes_squared(do: Tensor, out: Tensor, out_dtype: torch.dtype) -> Tensor:
    """s_i^2 = sum_d (dO_id O_id)^2 / 3 over the O_id that the dtype cannot hold exactly, as
    (n, G * rows, 1). An O_id it holds (a row that sees one key: O = V_j) is stored exactly."""
    n, g, rows, d = do.shape
    rounded = out.to(out_dtype).to(out.dtype) != out
    return (do * out * rounded).square().sum(dim=-1, keepdim=True).div_(3.0).reshape(n, g * rows, 1)


def _block_terms(p: Tensor, q: Tensor, k: Tensor, s2: Tensor):
    """For one block: dQ's squared sizes (n, G*rows, D), and dK's (n, Sk', D) to accumulate.
    p (n, G, rows, Sk'), q (n, G, rows, D), k (n, Sk', D), s2 (n, G*rows, 1)."""
    n, g, rows, keys = p.shape
    p2 = p.reshape(n, g * rows, keys).square()
    return (torch.matmul(p2, k.square()) * s2,
            torch.matmul(p2.mT, q.reshape(n, g * rows, -1).square() * s2))


def _largest(squared: list, scale: float) -> float:
    return max((scale * float(t.max().sqrt()) for t in squared if t.numel()), default=0.0)


@torch.no_grad()
def attention_delta_noise(q: Tensor, k: Tensor, v: Tensor, out: Tensor, do: Tensor, lse: Tensor,
                          causal: bool = False, sm_scale: Optional[float] = None,
                          max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> dict:
    """{"dq": size, "dk": size}: the largest delta-rounding noise of dQ and dK, without u
    (module doc). out and lse from the reference forward; O is stored in q's dtype."""
    st = _attention_setup(q, k, v, causal, sm_scale, REFERENCE, max_chunk_bytes, None)
    dims = st.dims
    qg, og, dog, lg = (grouped(x, dims) for x in (q, out, do, lse))
    kg = units(k, dims)
    dq_sq, dk_sq = [], []
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb = st.operand(kg[u0:u1])
            dk_acc = torch.zeros(kb.shape, dtype=st.acc, device=q.device)
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                qb, ob, dob = (st.operand(x[u0:u1, :, r0:r1]) for x in (qg, og, dog))
                p = probabilities(_attention_scores(st, qb, kb[:, :e], r0), lg[u0:u1, :, r0:r1].to(st.acc))
                dq_block, dk_block = _block_terms(p, qb, kb[:, :e], _row_sizes_squared(dob, ob, q.dtype))
                dq_sq.append(dq_block)
                dk_acc[:, :e] += dk_block
            dk_sq.append(dk_acc)
    return {"dq": _largest(dq_sq, st.scale), "dk": _largest(dk_sq, st.scale)}


@torch.no_grad()
def piecewise_delta_noise(q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, v: Tensor, out: Tensor,
                          do: Tensor, lse: Tensor, dist_threshold: int, causal: bool = False,
                          sm_scale: Optional[float] = None,
                          max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> dict:
    """{"dq1", "dk1", "dq2", "dk2": size}: as attention_delta_noise, with P split into its
    near (q1 . k1) and far (q2 . k2) pairs."""
    st = _piecewise_setup((q1, k1, q2, k2), v, dist_threshold, causal, sm_scale, REFERENCE, max_chunk_bytes)
    dims = st.dims
    qg = [grouped(x, dims) for x in (q1, q2, out, do)]
    lg = grouped(lse, dims)
    kg = [units(x, dims) for x in (k1, k2)]
    sizes = {name: [] for name in ("dq1", "dk1", "dq2", "dk2")}
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb = [st.operand(x[u0:u1]) for x in kg]
            dk_acc = [torch.zeros(kb[0].shape, dtype=st.acc, device=q1.device) for _ in range(2)]
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                q1b, q2b, ob, dob = (st.operand(x[u0:u1, :, r0:r1]) for x in qg)
                s, near = _piecewise_scores(st, (q1b, q2b), (kb[0][:, :e], kb[1][:, :e]), r0)
                p = probabilities(s, lg[u0:u1, :, r0:r1].to(st.acc))
                s2 = _row_sizes_squared(dob, ob, q1.dtype)
                for half, (part, qb, index) in enumerate(((p * near, q1b, "1"), (p * ~near, q2b, "2"))):
                    dq_block, dk_block = _block_terms(part, qb, kb[half][:, :e], s2)
                    sizes["dq" + index].append(dq_block)
                    dk_acc[half][:, :e] += dk_block
            sizes["dk1"].append(dk_acc[0])
            sizes["dk2"].append(dk_acc[1])
    return {name: _largest(squared, st.scale) for name, squared in sizes.items()}
