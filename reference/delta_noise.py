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

The accumulator's noise
-----------------------
The same propagation carries a second noise, in fp32 whatever the dtype: dP_ij and delta_i
are D-term sums accumulated in fp32 (an MMA's chain of fused multiply-adds, a row sum),
and where the softmax is peaked they cancel (one key: P = 1 and dP = delta, so dQ = dK = 0
exactly, finding B), leaving only their rounding. A sum of D terms x_d rounds every partial
sum; with terms of random sign the k-th partial sum has size sqrt(sum_{d<=k} x_d^2), so
the rounding noise of the whole sum has variance

    u^2 / 3 * sum_k partial_k^2  ~  u^2 * (D + 1) / 6 * sum_d x_d^2        (sequential order;
                                                                             a tree is smaller)
    a_ij = (D + 1) / 6 * sum_d (dO_id V_jd)^2,    b_i = (D + 1) / 6 * sum_d (dO_id O_id)^2
    noise(dQ_id) = u * scale * sqrt(sum_j P_ij^2 K_jd^2 c^2 a_ij  +  b_i (sum_j P_ij K_jd)^2)
    noise(dK_jd) = u * scale * sqrt(sum_i P_ij^2 Q_id^2 (c^2 a_ij + b_i))

(delta_i's error is shared by the whole row, so it adds coherently over j in dQ_i; dP_ij's
are independent.) c is the dropout keep scale (1 without dropout), taken for every pair:
an upper bound, as dropped pairs carry no dP. At inputs of size 1 these sizes are far
below the result (the rule's u_fp32 * M term already covers them); at inputs x10 the
cancelling terms are 100x larger and their noise passes the fixed MIN_MAGNITUDE allowance
of the result's dtype (finding F: fp16, one key per row, both paths 1e-4 .. 1e-3 off an
exact 0).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

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


class GradientNoise(NamedTuple):
    """Largest noise size per gradient name, without the unit roundoff: `stored_output` is
    multiplied by the output dtype's u, `accumulator` by fp32's (module doc)."""

    stored_output: dict
    accumulator: dict

    @classmethod
    def of(cls, squared: dict, scale: float) -> "GradientNoise":
        """From {name: ([stored-output squared sizes], [accumulator squared sizes])}."""
        return cls({name: _largest(parts[0], scale) for name, parts in squared.items()},
                   {name: _largest(parts[1], scale) for name, parts in squared.items()})


def _row_sizes_squared(do: Tensor, out: Tensor, out_dtype: torch.dtype) -> Tensor:
    """s_i^2 = sum_d (dO_id O_id)^2 / 3 over the O_id that the dtype cannot hold exactly, as
    (n, G * rows, 1). An O_id it holds (a row that sees one key: O = V_j) is stored exactly."""
    n, g, rows, d = do.shape
    rounded = out.to(out_dtype).to(out.dtype) != out
    return (do * out * rounded).square().sum(dim=-1, keepdim=True).div_(3.0).reshape(n, g * rows, 1)


def _sum_noise_factor(terms: int) -> float:
    """(D + 1) / 6: the variance / u^2 of a D-term fp32 sum's rounding, per unit of sum_d x_d^2
    (module doc)."""
    return (terms + 1) / 6.0


class _RowNoise(NamedTuple):
    """Per block, flattened to (n, G * rows, ...): s2 (the stored output's, per row), and the
    accumulator's a (per pair, times the keep scale squared) and b (per row)."""

    s2: Tensor
    a: Tensor
    b: Tensor


def _row_noise(do: Tensor, out: Tensor, v: Tensor, out_dtype: torch.dtype, keep_scale: float) -> _RowNoise:
    n, g, rows, d = do.shape
    do2 = do.reshape(n, g * rows, d)
    a = torch.matmul(do2.square(), v.square().mT).mul_(_sum_noise_factor(d) * keep_scale ** 2)
    b = (do2 * out.reshape(n, g * rows, d)).square().sum(dim=-1, keepdim=True).mul_(_sum_noise_factor(d))
    return _RowNoise(_row_sizes_squared(do, out, out_dtype), a, b)


def _block_terms(p: Tensor, q: Tensor, k: Tensor, noise: _RowNoise):
    """For one block: dQ's and dK's squared sizes, stored output's and accumulator's:
    ((dq_s, dq_a) as (n, G*rows, D), (dk_s, dk_a) as (n, Sk', D) to accumulate).
    p (n, G, rows, Sk'), q (n, G, rows, D), k (n, Sk', D)."""
    n, g, rows, keys = p.shape
    p1 = p.reshape(n, g * rows, keys)
    p2, q2 = p1.square(), q.reshape(n, g * rows, -1).square()
    dq_stored = torch.matmul(p2, k.square()) * noise.s2
    dk_stored = torch.matmul(p2.mT, q2 * noise.s2)
    dq_acc = torch.matmul(p2 * noise.a, k.square()) + noise.b * torch.matmul(p1, k).square()
    dk_acc = torch.matmul((p2 * (noise.a + noise.b)).mT, q2)
    return (dq_stored, dq_acc), (dk_stored, dk_acc)


def _largest(squared: list, scale: float) -> float:
    return max((scale * float(t.max().sqrt()) for t in squared if t.numel()), default=0.0)


def _zeros_like_pair(x: Tensor):
    return [torch.zeros_like(x), torch.zeros_like(x)]


@torch.no_grad()
def attention_delta_noise(q: Tensor, k: Tensor, v: Tensor, out: Tensor, do: Tensor, lse: Tensor,
                          causal: bool = False, sm_scale: Optional[float] = None, keep_scale: float = 1.0,
                          max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, **variant_args) -> GradientNoise:
    """The largest noise sizes of dQ and dK ("dq", "dk"), without u (module doc). out and
    lse from the reference forward; O is stored in q's dtype; keep_scale is dropout's 1/(1-p).

    ``variant_args``: window, softcap, alibi_slopes, seq_lens as for ``attention_forward``.
    Masks and ALiBi only change which P the noise travels through; softcap multiplies dS_ij
    by its derivative g_ij = 1 - tanh^2 <= 1, so the noise reaches dQ and dK through P_ij g_ij
    (both kinds: delta's and dP's errors enter dS before that factor)."""
    st = _attention_setup(q, k, v, causal, sm_scale, REFERENCE, max_chunk_bytes, None, variant_args)
    dims = st.dims
    qg, og, dog, lg = (grouped(x, dims) for x in (q, out, do, lse))
    kg, vg = units(k, dims), units(v, dims)
    squared = {"dq": ([], []), "dk": ([], [])}
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb, vb = st.operand(kg[u0:u1]), st.operand(vg[u0:u1])
            dk_acc = _zeros_like_pair(kb)
            for r0, r1 in spans(dims.sq, st.plan.rows):
                k0, k1 = st.key_span((r0, r1))
                qb, ob, dob = (st.operand(x[u0:u1, :, r0:r1]) for x in (qg, og, dog))
                s, cap_derivative = _attention_scores(st, qb, kb[:, k0:k1], (u0, r0, k0), want_derivative=True)
                p = probabilities(s, lg[u0:u1, :, r0:r1].to(st.acc))
                if cap_derivative is not None:
                    p.mul_(cap_derivative)
                noise = _row_noise(dob, ob, vb[:, k0:k1], q.dtype, keep_scale)
                dq_block, dk_block = _block_terms(p, qb, kb[:, k0:k1], noise)
                for kind in range(2):
                    squared["dq"][kind].append(dq_block[kind])
                    dk_acc[kind][:, k0:k1] += dk_block[kind]
            for kind in range(2):
                squared["dk"][kind].append(dk_acc[kind])
    return GradientNoise.of(squared, st.scale)


@torch.no_grad()
def piecewise_delta_noise(q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, v: Tensor, out: Tensor,
                          do: Tensor, lse: Tensor, dist_threshold: int, causal: bool = False,
                          sm_scale: Optional[float] = None,
                          max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> GradientNoise:
    """As attention_delta_noise for "dq1", "dk1", "dq2", "dk2", with P split into its near
    (q1 . k1) and far (q2 . k2) pairs; dP and delta are shared by both halves."""
    st = _piecewise_setup((q1, k1, q2, k2), v, dist_threshold, causal, sm_scale, REFERENCE, max_chunk_bytes)
    dims = st.dims
    qg = [grouped(x, dims) for x in (q1, q2, out, do)]
    lg = grouped(lse, dims)
    kg = [units(x, dims) for x in (k1, k2)]
    vg = units(v, dims)
    squared = {name: ([], []) for name in ("dq1", "dk1", "dq2", "dk2")}
    with ieee_fp32_matmul():
        for u0, u1 in spans(dims.units, st.plan.units):
            kb = [st.operand(x[u0:u1]) for x in kg]
            vb = st.operand(vg[u0:u1])
            dk_acc = [_zeros_like_pair(kb[0]) for _ in range(2)]
            for r0, r1 in spans(dims.sq, st.plan.rows):
                e = st.key_end(r1)
                q1b, q2b, ob, dob = (st.operand(x[u0:u1, :, r0:r1]) for x in qg)
                s, near = _piecewise_scores(st, (q1b, q2b), (kb[0][:, :e], kb[1][:, :e]), r0)
                p = probabilities(s, lg[u0:u1, :, r0:r1].to(st.acc))
                noise = _row_noise(dob, ob, vb[:, :e], q1.dtype, 1.0)
                for half, (part, qb, index) in enumerate(((p * near, q1b, "1"), (p * ~near, q2b, "2"))):
                    dq_block, dk_block = _block_terms(part, qb, kb[half][:, :e], noise)
                    for kind in range(2):
                        squared["dq" + index][kind].append(dq_block[kind])
                        dk_acc[half][kind][:, :e] += dk_block[kind]
            for half, index in enumerate("12"):
                for kind in range(2):
                    squared["dk" + index][kind].append(dk_acc[half][kind])
    return GradientNoise.of(squared, st.scale)
