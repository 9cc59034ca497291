"""`flash_attention`: the torch-facing operator around the Triton kernels.

It validates arguments, allocates outputs (NaN-poisoned under the harness),
picks launch configurations for the current target (kernels.tuning), launches, and
wires the backward kernels into autograd.  The launches and the autograd function
serve flash_attention_varlen (kernels.flash_varlen) as well: an AttentionProblem
(kernels.problem) says which layout and which variants a call has.
"""

from __future__ import annotations

import math

import torch

from .allocation import new_forward_outputs, new_output, new_varlen_forward_outputs
from .dropout import DropoutParams, dropout_keep_mask, dropout_params
from .flash_backward import delta_kernel, dkdv_kernel, dq_kernel
from .flash_forward import flash_forward_kernel
from .launch import ceil_div, head_dim_bound, launch, launch_kwargs, launches_on_device, padded_head_dim
from .packed_tiles import tile_list
from .problem import AttentionProblem, resolve_window
from .targets import current_target, interpreting
from .total_attention import total_attention_kernel
from .validation import (
    DTYPE_NAMES,
    check_attention_shapes,
    check_device,
    check_flag,
    check_head_dim,
    check_same,
    check_sm_scale,
    check_dtype_supported,
    check_forward_only,
    check_tensor,
    check_alibi_slopes,
    check_softcap,
    check_window_size,
)

_NO_DROPOUT_ARGS = (0, 0, 0, 1.0)  # seed_lo, seed_hi, drop_threshold, keep_scale


def _dropout_kwargs(dropout: DropoutParams | None) -> tuple[tuple, dict]:
    if dropout is None:
        return _NO_DROPOUT_ARGS, dict(DROPOUT=False)
    return dropout.kernel_args(), dict(DROPOUT=True)


def _forward_outputs(q, k, problem: AttentionProblem):
    """out, lse and whether they are already final (kernels.allocation)."""
    if problem.varlen:
        return new_varlen_forward_outputs(q, k.shape[0])
    return new_forward_outputs(q, problem.seq_k)


def _tiles(problem: AttentionProblem, axis: str, block: int, heads: int) -> tuple[int, int, dict]:
    """(blocks, batch_heads, kwargs) of a launch over the query ("q") or key ("k") tiles of
    `block` rows, `heads` heads per sequence: a packed batch's tile list
    (kernels.packed_tiles: query tiles from the last, key tiles from the first) where there
    is one, else every tile of the longest sequence for each (sequence, head)."""
    if problem.varlen:
        cu_seqlens, offsets = ((problem.cu_seqlens_q, problem.offsets_q) if axis == "q"
                               else (problem.cu_seqlens_k, problem.offsets_k))
        tiles = tile_list(cu_seqlens, offsets, block, last_tile_first=axis == "q")
        if tiles is not None:
            return tiles.shape[1], heads, dict(TILES=tiles)
    return ceil_div(problem.seq_q if axis == "q" else problem.seq_k, block), problem.batch * heads, {}


def _forward(q, k, v, problem: AttentionProblem):
    heads, kv_heads, seq_q, seq_k = problem.heads, problem.kv_heads, problem.seq_q, problem.seq_k
    out, lse, done = _forward_outputs(q, k, problem)
    if done:
        return out, lse
    dropout, strides = problem.dropout, problem.strides
    block_d = padded_head_dim(problem.head_dim, q.dtype)
    tables = {"variants": "dropout"} if dropout is not None else problem.table_choice()
    cfg = launch_kwargs("fwd", block_d, q.dtype, **tables, streamed=(k, v))
    head_dim = head_dim_bound(problem.head_dim, block_d, cfg)  # None: no column masks
    drop_args, drop_flag = _dropout_kwargs(dropout)
    blocks, batch_heads, tiles = _tiles(problem, "q", cfg["BLOCK_M"], heads)
    launch(flash_forward_kernel, blocks, batch_heads,
           q, k, v, out, lse, problem.sm_scale,
           *strides(q), *strides(k), *strides(v), *strides(out),
           heads, heads // kv_heads, seq_q, seq_k, head_dim, *drop_args, *problem.variant_args(),
           CAUSAL=problem.causal, BLOCK_D=block_d, INTERPRETED=interpreting(),
           STAGES=cfg["num_stages"], **drop_flag, **problem.variant_flags(), **tiles, **cfg)
    return out, lse


def _backward(q, k, v, out, lse, do, problem: AttentionProblem):
    heads, kv_heads, seq_q, seq_k = problem.heads, problem.kv_heads, problem.seq_q, problem.seq_k
    dq = new_output(q.shape, q.dtype, q.device)
    dk = new_output(k.shape, k.dtype, k.device)
    dv = new_output(v.shape, v.dtype, v.device)
    if q.numel() == 0 or k.numel() == 0:  # Sq or Sk 0 (dense), no tokens (varlen): no pair
        return dq.zero_(), dk.zero_(), dv.zero_()
    strides = problem.strides
    block_d = padded_head_dim(problem.head_dim, q.dtype)
    head_dim = head_dim_bound(problem.head_dim, block_d)  # None: no column masks
    emulate = interpreting()

    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)  # lse's layout
    pre = launch_kwargs("bwd_preprocess", block_d, q.dtype, tiles=("BLOCK_M",))
    blocks, batch_heads, tiles = _tiles(problem, "q", pre["BLOCK_M"], heads)
    launch(delta_kernel, blocks, batch_heads,
           out, do, delta, *strides(out), *strides(do), heads, seq_q, head_dim, BLOCK_D=block_d,
           **problem.varlen_kwargs(), **tiles, **pre)

    group = heads // kv_heads
    inputs = (*strides(q), *strides(k), *strides(v), *strides(do))
    drop_args, drop_flag = _dropout_kwargs(problem.dropout)
    common = dict(CAUSAL=problem.causal, BLOCK_D=block_d, INTERPRETED=emulate, **drop_flag,
                  **problem.variant_flags())
    variant_args = problem.variant_args()
    dkdv = launch_kwargs("bwd_dkdv", block_d, q.dtype, **problem.table_choice(), streamed=(q, do))
    blocks, batch_heads, tiles = _tiles(problem, "k", dkdv["BLOCK_N"], kv_heads)
    launch(dkdv_kernel, blocks, batch_heads,
           q, k, v, do, lse, delta, dk, dv, problem.sm_scale,
           *inputs, *strides(dk), *strides(dv),
           heads, kv_heads, group, seq_q, seq_k, head_dim_bound(problem.head_dim, block_d, dkdv),
           *drop_args, *variant_args, STAGES=dkdv["num_stages"], **common, **tiles, **dkdv)
    dqk = launch_kwargs("bwd_dq", block_d, q.dtype, **problem.table_choice(), streamed=(k, v))
    blocks, batch_heads, tiles = _tiles(problem, "q", dqk["BLOCK_M"], heads)
    launch(dq_kernel, blocks, batch_heads,
           q, k, v, do, lse, delta, dq, problem.sm_scale,
           *inputs, *strides(dq), heads, group, seq_q, seq_k, head_dim_bound(problem.head_dim, block_d, dqk),
           *drop_args, *variant_args, STAGES=dqk["num_stages"], **common, **tiles, **dqk)
    return dq, dk, dv


def _total_attention(q, k, lse, problem: AttentionProblem) -> torch.Tensor:
    """total[b, h, j] = sum_i P_ij (fp32), from the forward's log-normalizer (dense only)."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    total = new_output((batch, heads, seq_k), torch.float32, q.device)
    if seq_k == 0:
        return total
    if seq_q == 0:
        return total.zero_()
    block_d = padded_head_dim(problem.head_dim, q.dtype)
    cfg = launch_kwargs("total", block_d, q.dtype)
    head_dim = head_dim_bound(problem.head_dim, block_d, cfg)  # None: no column masks
    launch(total_attention_kernel, ceil_div(seq_k, cfg["BLOCK_N"]), batch * heads,
           q, k, lse, total, problem.sm_scale, *q.stride(), *k.stride(),
           heads, heads // kv_heads, seq_q, seq_k, head_dim, *problem.score_args(),
           CAUSAL=problem.causal, BLOCK_D=block_d, INTERPRETED=interpreting(), **problem.score_flags(), **cfg)
    return total


class _FlashAttention(torch.autograd.Function):
    """Dense and varlen alike: the AttentionProblem says which."""

    @staticmethod
    def forward(ctx, q, k, v, problem):
        out, lse = _forward(q, k, v, problem)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.problem = problem
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(q, k, v, out, lse, do, ctx.problem)
        return dq, dk, dv, None


def check_inputs(q, k, v, packed: bool = False) -> None:
    """Everything about q, k, v: tensors of one dtype the target supports, on its device,
    shaped for dense (or, `packed`, varlen) attention, with a supported head dim."""
    axes = "(total_tokens, heads, head_dim)" if packed else "(batch, heads, seqlen, head_dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, rank=3 if packed else 4, dtypes=DTYPE_NAMES, axes=axes)
    tensors = {"q": q, "k": k, "v": v}
    check_same(tensors, "dtype")
    check_same(tensors, "device")
    target = current_target()
    if launches_on_device():
        check_device("q", q, target)
    check_dtype_supported("q", q, target)
    for name, t in tensors.items():
        check_forward_only(name, t)
    check_attention_shapes(q, k, v, packed=packed)
    check_head_dim(q.shape[-1])


def _check_arguments(q, k, v, causal, sm_scale) -> float:
    """Validate everything about the tensors and the mask; return sm_scale."""
    check_inputs(q, k, v)
    check_flag("causal", causal)
    return 1.0 / math.sqrt(q.shape[3]) if sm_scale is None else check_sm_scale(sm_scale)


def flash_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                    return_total_attention=False, dropout_p=0.0, dropout_seed=None,
                    window_size=None, softcap=None, alibi_slopes=None):
    """Scaled dot-product attention, FlashAttention-2 style, with autograd.

    q: (batch, heads, seq_q, head_dim); k, v: (batch, kv_heads, seq_k, head_dim)
    with kv_heads dividing heads (MQA/GQA). fp16, bf16 or fp32, all the same;
    or fp8 (float8_e4m3fn / float8_e5m2, forward only) where the target
    lists it, with an fp16 output.
    Head dims 16, 32, 64, 96, 128, 192 and 256 (non-powers of two are padded).
    causal: bottom-right aligned mask (key j visible to query i iff
        j <= i + seq_k - seq_q); rows that see no key give output 0.
    sm_scale: score scale, default 1/sqrt(head_dim).
    return_log_normalizer: also return lse = ln(sum_j exp(sm_scale q.k_j)),
        shape (batch, heads, seq_q), fp32 (-inf for rows that see no key).
        Always the un-dropped normalizer.
    return_total_attention: also return total[b, h, j] = sum_i P_ij, the
        normalised, un-dropped attention weights summed over the queries,
        shape (batch, heads, seq_k), fp32; rows that see no key add 0.
        Not differentiable.
    dropout_p: probability in [0, 1) of dropping each attention weight; kept
        weights are scaled by 1/(1 - dropout_p).
    dropout_seed: int (used mod 2^64) or None to draw one from torch's default
        CPU generator (so torch.manual_seed makes runs reproducible). The mask
        is a function of (seed, b*heads + h, i, j) only: the backward, other
        launch configurations and `kernels.dropout_keep_mask` reproduce it.
    window_size: (left, right) sliding window, FlashAttention-2's: query i sees key j
        iff i + seq_k - seq_q - left <= j <= i + seq_k - seq_q + right; -1 is
        unbounded on that side, None is (-1, -1).  With causal, right is 0.  Key
        tiles outside every row's band are skipped (cost grows with the band).
    softcap: c > 0 caps the scaled scores to s = c * tanh(sm_scale q.k / c) before
        the softmax (None: off).
    alibi_slopes: fp32 tensor (heads,) or (batch, heads) on q's device; adds
        -slope * |i + seq_k - seq_q - j| to the (capped) scaled score (None: off).
    With a window, a cap or ALiBi, lse and total attention are those of the
    softmax the options define.

    Returns out (like q; fp16 for fp8 inputs) when no extra output is asked for; otherwise the tuple
    (out, lse, total) holding only the requested extras, in that order: e.g.
    (out, lse) or (out, total).  Strided (non-contiguous) inputs are read in
    place through their strides, never copied.
    """
    sm_scale = _check_arguments(q, k, v, causal, sm_scale)
    check_flag("return_log_normalizer", return_log_normalizer)
    check_flag("return_total_attention", return_total_attention)
    dropout = dropout_params(dropout_p, dropout_seed)
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    causal, band = resolve_window(check_window_size(window_size), causal, seq_q, seq_k)
    problem = AttentionProblem(batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, sm_scale, dropout,
                               band=band, softcap=check_softcap(softcap),
                               alibi_slopes=contiguous(check_alibi_slopes(alibi_slopes, batch, heads, q.device)))

    out, lse = _FlashAttention.apply(q, k, v, problem)
    extras = (lse,) if return_log_normalizer else ()
    if return_total_attention:
        extras += (_total_attention(q.detach(), k.detach(), lse, problem),)
    return (out, *extras) if extras else out


def contiguous(slopes: torch.Tensor | None) -> torch.Tensor | None:
    """ALiBi slopes as the kernels index them (a head stride of 1); never differentiated."""
    return None if slopes is None else slopes.detach().contiguous()


# How a harness replays this operator's dropout (conformance.judging.dropout looks for it here).
flash_attention.dropout_keep_mask = dropout_keep_mask
