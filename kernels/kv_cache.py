"""`kv_cache_attention`: FlashAttention-2's `flash_attn_with_kvcache`, forward only.

A few new query tokens per sequence attend to that sequence's cached keys and values,
optionally after appending their own (k_new, v_new) to the cache in place.  The cache is
contiguous (B, Smax, Hkv, D) or paged (num_pages, page_size, Hkv, D) through a block
table; both run one kernel (kernels.decode_cache says how).  The keys are split into
contiguous runs (FlashDecoding): a few query rows per sequence give few programs, and the
splits give the device enough of them; a merge kernel combines the splits
(kernels.decode_forward).  How many splits, and every other launch argument that follows
from the call's shapes rather than its values, is the call's launch plan (kernels.decode_plan).
A decode loop calls with one signature step after step: the plan, and the checks of the
tensors' shapes, dtypes and devices (_checked_layout), are worked out once per signature, so
that a step's host time is little more than its other checks, allocations and launches.

Validation reuses kernels.validation, allocation kernels.allocation (the scratch too, so
poisoned outputs show every element a program leaves unwritten), launching kernels.launch
with the launch tables' "decode_split" and "decode_merge" roles (kernels.tuning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import torch

from .allocation import new_output
from . import value_check
from .decode_cache import append_kernel
from .decode_forward import decode_merge_kernel, decode_split_kernel
from .decode_plan import launch_plan
from .flash import contiguous
from .launch import ceil_div, head_dim_bound, launch, launches_on_device, padded_head_dim
from .problem import resolve_window, score_arguments
from .targets import Target, current_target
from .tuning import record_launch
from .validation import (
    DTYPE_NAMES,
    FP8,
    HIGH_PRECISION,
    check_alibi_slopes,
    check_block_table,
    check_cache_seqlens,
    check_descale,
    check_device,
    check_dtype_supported,
    check_flag,
    check_head_dim,
    check_new_kv,
    check_num_splits,
    check_optional_softcap,
    check_same,
    check_sm_scale,
    check_tensor,
    check_window_size,
)

# window_size's default, no window: the one window a call need not check (it is the default
# object itself, not any equal pair).
NO_WINDOW = (-1, -1)
# New tokens per program of the append: a copy, no table of its own.
APPEND_TOKENS = 16
_CACHE_AXES = "(batch, seqlen_cache, kv_heads, head_dim) or, paged, (num_pages, page_size, kv_heads, head_dim)"


# Not frozen: a frozen dataclass's __init__ sets each of these fields through object.__setattr__,
# ~5 us a call, a decode step's host time; nothing changes a problem once it is made.
@dataclass(eq=False, slots=True)
class DecodeProblem:
    """One validated call: shapes; the block table (B, max_pages) int32 and page size the
    kernels address the cache by; the context lengths L_b (int32 on the device, and the
    capacity per sequence, which bounds them: the host never reads the lengths); the mask and
    score options as kernels.problem resolves them; the fp8 scales; the target it launches to."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    head_dim: int
    block_table: torch.Tensor
    page_size: int
    context_lens: torch.Tensor
    capacity: int
    causal: bool
    band: tuple[int, int] | None
    softcap: float | None
    alibi_slopes: torch.Tensor | None
    sm_scale: float
    descales: tuple[float, float]
    dequantize: bool
    num_splits: int
    target: Target
    value_check: value_check.PendingCheck | None  # check_values=True: its answer's flags, read by the kernels

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def rows(self) -> int:
        """Rows per (sequence, kv head): the query tokens x the heads of one kv head's group."""
        return self.seq_q * self.group

    def score_args(self) -> tuple:
        """window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b (None when off)."""
        return score_arguments(self.band, self.softcap, self.alibi_slopes)

    def kernel_flags(self) -> dict:
        """The split kernel's constexpr flags: the mask, the score variants, an fp8 cache, the
        values' check."""
        return dict(CAUSAL=self.causal, WINDOW=self.band is not None, SOFTCAP=self.softcap is not None,
                    ALIBI=self.alibi_slopes is not None, DEQUANTIZE=self.dequantize,
                    CHECKED=self.value_check is not None)

    def value_flags(self) -> torch.Tensor:
        """The values' check's per-sequence flags the kernels read (CHECKED), else any int32
        tensor standing in (never read)."""
        return self.context_lens if self.value_check is None else self.value_check.flags


def _check_tensors(q, k_cache, v_cache, target: Target) -> None:
    """q (B, Sq, H, D) in fp16/bf16/fp32 on the target's device; the caches 4-D, alike, in
    q's dtype or fp8 (where the target converts fp8), one head dim, kv heads dividing H."""
    check_tensor("q", q, rank=4, dtypes=HIGH_PRECISION, axes="(batch, seqlen_q, heads, head_dim)")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, cache, rank=4, dtypes=DTYPE_NAMES, axes=_CACHE_AXES)
    check_same({"q": q, "k_cache": k_cache, "v_cache": v_cache}, "device")
    check_same({"k_cache": k_cache, "v_cache": v_cache}, "dtype")
    if launches_on_device():
        check_device("q", q, target)
    check_dtype_supported("q", q, target)
    _check_cache_dtype(k_cache.dtype, q.dtype, target)
    if q.requires_grad and torch.is_grad_enabled():
        raise ValueError("q: kv_cache_attention is forward-only (there is no backward); "
                         "detach q or call under torch.no_grad()")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: expected the same shape as k_cache {tuple(k_cache.shape)}, "
                         f"got {tuple(v_cache.shape)}")
    check_head_dim(q.shape[3])
    if k_cache.shape[3] != q.shape[3]:
        raise ValueError(f"k_cache: expected head_dim {q.shape[3]} (from q), got {k_cache.shape[3]}")
    heads, kv_heads = q.shape[2], k_cache.shape[2]
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"k_cache: number of kv heads ({kv_heads}) must divide the number of query heads ({heads})")


def _check_cache_dtype(cache_dtype: torch.dtype, q_dtype: torch.dtype, target) -> None:
    """q's dtype, or an fp8 dtype the target converts: fp8 MMA targets list it, and Triton's
    CPU interpreter converts it (triton 3.9, measured)."""
    if cache_dtype in FP8:
        if not (target.interpreted or FP8[cache_dtype] in target.dtypes):
            raise ValueError(f"k_cache: {cache_dtype} caches are not supported on target {target.name}; "
                             f"supported: {', '.join(target.dtypes)}")
    elif cache_dtype != q_dtype:
        raise TypeError(f"k_cache: expected q's dtype {q_dtype} or an fp8 dtype "
                        f"({', '.join(str(d) for d in FP8)}), got {cache_dtype}")


def _cache_pages(k_cache, block_table, batch: int, device) -> tuple[int, int, bool]:
    """(page size, capacity per sequence, paged): a contiguous cache is one page of Smax
    positions per sequence, sequence b's page b (_contiguous_table)."""
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache: expected batch size {batch} (from q) for a contiguous cache, "
                             f"got {k_cache.shape[0]} (pass block_table for a paged one)")
        return max(k_cache.shape[1], 1), k_cache.shape[1], False
    check_block_table(block_table, batch, device)
    page_size = k_cache.shape[1]
    if page_size == 0:
        raise ValueError("k_cache: expected pages of at least one position, got page_size 0")
    return page_size, block_table.shape[1] * page_size, True


class _Layout(NamedTuple):
    """What the checks of the tensors' shapes, dtypes and devices find (_check_layout)."""

    batch: int
    seq_q: int
    heads: int
    head_dim: int
    kv_heads: int
    page_size: int
    capacity: int
    paged: bool
    appended: int


def _check_layout(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, target: Target) -> _Layout:
    """The tensors' checks, in the order the arguments are checked: q and the caches, the block
    table, the new tokens, the lengths."""
    _check_tensors(q, k_cache, v_cache, target)
    batch, seq_q, heads, head_dim = q.shape
    kv_heads, device = k_cache.shape[2], q.device
    page_size, capacity, paged = _cache_pages(k_cache, block_table, batch, device)
    appended = seq_q if check_new_kv(k_new, v_new, (batch, seq_q, kv_heads, head_dim), k_cache.dtype, device) else 0
    check_cache_seqlens(cache_seqlens, batch, device)
    return _Layout(batch, seq_q, heads, head_dim, kv_heads, page_size, capacity, paged, appended)


# Layouts that passed _check_layout, by everything it reads (_signature): a decode loop passes
# tensors of one signature step after step, and the forty-odd type, shape, dtype and device
# checks cost more host time than looking their signature up.  A signature not seen before
# (anything changed, a bad argument) is checked in full, so every error is raised as it was.
# Emptied when full.
_CHECKED_LAYOUTS: dict[tuple, _Layout] = {}
_LAYOUTS_KEPT = 256


def _signature(tensors: tuple, target: Target) -> tuple:
    """What _check_layout reads of `tensors` (q first): each one's shape, dtype and device (its
    type where it is no tensor), whether q would need a backward, the target, and whether
    launches go to the device."""
    q = tensors[0]
    needs_grad = isinstance(q, torch.Tensor) and q.requires_grad and torch.is_grad_enabled()
    return (*[(t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t) for t in tensors],
            needs_grad, target, launches_on_device())


def _checked_layout(tensors: tuple, target: Target) -> _Layout:
    """_check_layout(*tensors, target), once per signature."""
    signature = _signature(tensors, target)
    layout = _CHECKED_LAYOUTS.get(signature)
    if layout is None:
        layout = _check_layout(*tensors, target)
        if len(_CHECKED_LAYOUTS) >= _LAYOUTS_KEPT:
            _CHECKED_LAYOUTS.clear()
        _CHECKED_LAYOUTS[signature] = layout
    return layout


def _contiguous_table(batch: int, device: torch.device) -> torch.Tensor:
    """[[0], [1], ..., [B - 1]] int32 on `device`: made once per (batch, device), since the
    kernels only read it -- but while a CUDA graph is being captured, made afresh (a tensor
    made then holds its values only once the graph runs)."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return _arange_table.__wrapped__(batch, device)
    return _arange_table(batch, device)


@lru_cache(maxsize=16)
def _arange_table(batch: int, device: torch.device) -> torch.Tensor:
    return torch.arange(batch, dtype=torch.int32, device=device)[:, None]


def _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                     softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale,
                     check_values: bool) -> DecodeProblem:
    """Every argument, before anything is launched (kernels.validation's checks); the values of
    cache_seqlens and block_table only with `check_values` (one read back to the host)."""
    target = current_target()
    batch, seq_q, heads, head_dim, kv_heads, page_size, capacity, paged, appended = _checked_layout(
        (q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new), target)
    device = q.device
    table = block_table if paged else _contiguous_table(batch, device)
    check_flag("check_values", check_values)
    check_flag("causal", causal)
    window = NO_WINDOW if window_size is NO_WINDOW else check_window_size(window_size)
    causal, band = resolve_window(window, causal, seq_q, capacity)
    slopes = contiguous(check_alibi_slopes(alibi_slopes, batch, heads, device))
    descales = (check_descale("k_descale", k_descale, k_cache.dtype),
                check_descale("v_descale", v_descale, k_cache.dtype))
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else check_sm_scale(sm_scale)
    splits, softcap = check_num_splits(num_splits), check_optional_softcap(softcap)
    # Last, once every other argument is known good: the values' check is launched, not yet read.
    pending = value_check.start(cache_seqlens, appended, capacity, table, paged, k_cache.shape[0],
                                page_size) if check_values else None
    return DecodeProblem(batch, heads, kv_heads, seq_q, head_dim, table, page_size,
                         cache_seqlens + appended if appended else cache_seqlens.contiguous(), capacity, causal, band,
                         softcap, slopes, scale, descales, k_cache.dtype in FP8, splits, target, pending)


def _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem: DecodeProblem, block_d: int) -> None:
    """k_new, v_new written to the cache at positions cache_seqlens[b] .. + Sq - 1, in place."""
    if k_new.numel() == 0:
        return
    launch(append_kernel, ceil_div(problem.seq_q, APPEND_TOKENS), problem.batch * problem.kv_heads,
           k_new, v_new, k_cache, v_cache, problem.block_table, cache_seqlens, problem.value_flags(),
           *k_new.stride(), *v_new.stride(), *k_cache.stride(), *v_cache.stride(), *problem.block_table.stride(),
           problem.kv_heads, problem.seq_q, problem.page_size, head_dim_bound(problem.head_dim, block_d),
           problem.batch, BLOCK_M=APPEND_TOKENS, BLOCK_D=block_d, CHECKED=problem.value_check is not None)


def _attend(q, k_cache, v_cache, problem: DecodeProblem):
    """out (B, Sq, H, D) like q, lse (B, H, Sq) fp32: the splits, then their merge."""
    kv_heads, interpreted, batch_heads = problem.kv_heads, problem.target.interpreted, problem.batch * problem.kv_heads
    out = new_output(q.shape, q.dtype, q.device)
    lse = new_output((problem.batch, problem.heads, problem.seq_q), torch.float32, q.device)
    if out.numel() == 0:
        return out, lse
    plan = launch_plan(q.dtype, problem.head_dim, batch_heads, problem.rows, problem.capacity, problem.num_splits,
                       problem.dequantize, q.device, problem.target)
    # Scratch (B, Hkv, splits, rows, D) and (B, Hkv, splits, rows), fp32: every element is
    # written by the program of its (row tile, split), an empty split's too (0, -inf).
    partial_out = new_output(plan.scratch, torch.float32, q.device)
    partial_lse = new_output(plan.scratch[:2], torch.float32, q.device)
    partial_strides = (*partial_out.stride(), partial_lse.stride(0))
    record_launch("decode_split", plan.split_config)
    launch(decode_split_kernel, plan.split_blocks, batch_heads,
           q, k_cache, v_cache, problem.block_table, problem.context_lens, problem.value_flags(), partial_out,
           partial_lse,
           problem.sm_scale, *problem.descales,
           *q.stride(), *k_cache.stride(), *v_cache.stride(), *problem.block_table.stride(), *partial_strides,
           kv_heads, problem.group, problem.seq_q, problem.page_size, plan.split_head_dim, plan.splits,
           *problem.score_args(),
           BLOCK_D=plan.block_d, INTERPRETED=interpreted, **problem.kernel_flags(), **plan.split)
    record_launch("decode_merge", plan.merge_config)
    launch(decode_merge_kernel, plan.merge_blocks, batch_heads,
           partial_out, partial_lse, out, lse, *partial_strides, *out.stride(), *lse.stride(),
           kv_heads, problem.group, problem.seq_q, plan.merge_head_dim, plan.splits,
           BLOCK_D=plan.block_d, INTERPRETED=interpreted, **plan.merge)
    return out, lse


def kv_cache_attention(q, k_cache, v_cache, cache_seqlens, *, block_table=None, k_new=None, v_new=None,
                       causal=False, window_size=NO_WINDOW, softcap=0.0, alibi_slopes=None, sm_scale=None,
                       num_splits=0, return_log_normalizer=False, k_descale=None, v_descale=None,
                       check_values=True):
    """Attention of new query tokens to a KV cache, FlashAttention-2's flash_attn_with_kvcache.

    q: (batch, seqlen_q, heads, head_dim), fp16, bf16 or fp32; head dims as flash_attention's.
    k_cache, v_cache: (batch, seqlen_cache, kv_heads, head_dim), or with block_table paged
        (num_pages, page_size, kv_heads, head_dim); kv_heads dividing heads (query head h
        reads kv head h // (heads / kv_heads)).  q's dtype, or float8_e4m3fn / float8_e5m2
        with k_descale / v_descale (where the target converts fp8): keys and values are then
        dequantised as cache.to(fp32) * descale, rounded to q's dtype, before the products.
    cache_seqlens: int32 (batch,), each sequence's cache length before the append (0 allowed).
    block_table: int32 (batch, max_pages): logical page p of sequence b is physical page
        block_table[b, p]; any page size >= 1.  Entries past a sequence's length are never read.
    k_new, v_new: (batch, seqlen_q, kv_heads, head_dim) in the cache's dtype, both or neither:
        written into the caches, in place, at positions cache_seqlens[b] .. + seqlen_q - 1 of
        sequence b before attending; nothing else of the caches is touched.  The context length
        is then L_b = cache_seqlens[b] + seqlen_q, else L_b = cache_seqlens[b].
    causal, window_size, softcap, alibi_slopes, sm_scale: flash_attention's, with Sk = L_b per
        sequence: query token i sees key j < L_b, with causal j <= i + L_b - seqlen_q; a window
        (left, right) (-1 unbounded) i + L_b - seqlen_q - left <= j <= i + L_b - seqlen_q + right;
        softcap 0 is no cap; ALiBi slopes (heads,) or (batch, heads) fp32.
    num_splits: 0 lets the kernel choose (decode_plan.split_count); n >= 1 splits every sequence's
        keys into n runs of whole key tiles, merged by log-sum-exp.
    return_log_normalizer: also return lse (batch, heads, seqlen_q) fp32.
    check_values: check cache_seqlens' and block_table's values (a length beyond the cache, a
        page index outside it: a clear error, the caches untouched and nothing read out of
        bounds).  It costs one small kernel and one read back to the host at the end of the
        call, which waits for the GPU work queued before the check (not for the call's own
        attention: kernels.value_check); refused under CUDA graph capture.  False skips it,
        for a serving loop that builds its own tables (FlashAttention-2's and vLLM's kernels
        never check) -- bad values then read and write wherever they point.  Shapes, dtypes
        and devices are checked either way.

    Rows that see no key (L_b = 0, or all masked) give out 0 and lse -inf.  Returns out
    (batch, seqlen_q, heads, head_dim) in q's dtype, or (out, lse).  Forward only.
    """
    problem = _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                               softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale, check_values)
    check_flag("return_log_normalizer", return_log_normalizer)
    if k_new is not None:
        _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem, padded_head_dim(problem.head_dim, q.dtype))
    out, lse = _attend(q, k_cache, v_cache, problem)
    if problem.value_check is not None:
        value_check.finish(problem.value_check)  # raises where a value leaves the cache
    return (out, lse) if return_log_normalizer else out
