"""`kv_cache_attention`: FlashAttention-2's `flash_attn_with_kvcache`, forward only.

A few new query tokens per sequence attend to that sequence's cached keys and values,
optionally after appending their own (k_new, v_new) to the cache in place.  The cache is
contiguous (B, Smax, Hkv, D) or paged (num_pages, page_size, Hkv, D) through a block
table; both run one kernel, which reads a paged cache's addresses through its table and a
contiguous cache's from the position alone (kernels.decode_cache).  The keys are split into
contiguous runs (FlashDecoding): a few query rows per sequence give few programs, and the
splits give the device enough of them; a merge kernel combines the splits
(kernels.decode_forward).  How many splits, and every other launch argument that follows
from the call's shapes rather than its values, is the call's launch plan (kernels.decode_plan).
A decode loop calls with one signature step after step: the plan, and the checks of the
tensors' shapes, dtypes and devices (kernels.kv_cache_checks), are worked out once per
signature; and a call whose signature was seen before launches the first call's recorded
launches again with its own tensors (kernels.step_replay, under kernels.decode_steps' key),
so that a step's host time is little more than its allocations and launchers.

Validation reuses kernels.validation, allocation kernels.allocation (the scratch too, so
poisoned outputs show every element a program leaves unwritten), launching kernels.launch
with the launch tables' "decode_split" and "decode_merge" roles (kernels.tuning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .allocation import new_output
from . import decode_steps, replay, step_replay, value_check
from .decode_cache import append_kernel, table_arguments
from .decode_forward import decode_merge_kernel, decode_split_kernel
from .decode_plan import launch_plan
from .flash import contiguous
from .kv_cache_checks import Layout, checked_layout
from .launch import ceil_div, head_dim_bound, launch, padded_head_dim
from .problem import resolve_window, score_arguments
from .targets import Target, current_target
from .tuning import record_launch, recorded_launches
from .validation import (
    FP8,
    check_alibi_slopes,
    check_descale,
    check_flag,
    check_num_splits,
    check_optional_softcap,
    check_sm_scale,
    check_window_size,
)

# window_size's default, no window: the one window a call need not check (it is the default
# object itself, not any equal pair).
NO_WINDOW = (-1, -1)
# New tokens per program of the append: a copy, no table of its own.
APPEND_TOKENS = 16


# Not frozen: a frozen dataclass's __init__ sets each of these fields through object.__setattr__,
# ~5 us a call, a decode step's host time; nothing changes a problem once it is made.
@dataclass(eq=False, slots=True)
class DecodeProblem:
    """One validated call: its layout (shapes, the page size the kernels address the cache by,
    the capacity per sequence, which bounds the lengths: the host never reads them); the block
    table (B, max_pages) int32; the context lengths L_b (int32 on the device); the mask and
    score options as kernels.problem resolves them; the fp8 scales; the target it launches to."""

    layout: Layout
    block_table: torch.Tensor | None  # None: a contiguous cache, which has none
    context_lens: torch.Tensor
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
        return self.layout.heads // self.layout.kv_heads

    @property
    def rows(self) -> int:
        """Rows per (sequence, kv head): the query tokens x the heads of one kv head's group."""
        return self.layout.seq_q * self.group

    def score_args(self) -> tuple:
        """window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b (None when off)."""
        return score_arguments(self.band, self.softcap, self.alibi_slopes)

    def kernel_flags(self) -> dict:
        """The split kernel's constexpr flags: the mask, the score variants, an fp8 cache, the
        values' check, a paged cache."""
        return dict(CAUSAL=self.causal, WINDOW=self.band is not None, SOFTCAP=self.softcap is not None,
                    ALIBI=self.alibi_slopes is not None, DEQUANTIZE=self.dequantize,
                    CHECKED=self.value_check is not None, PAGED=self.layout.paged)

    def table_args(self) -> tuple:
        """BLOCK_TABLE, stride_tb, stride_tp as the kernels take them (decode_cache.table_arguments;
        a contiguous cache's kernels get the context lengths standing in)."""
        return table_arguments(self.block_table, self.context_lens)

    def value_flags(self) -> torch.Tensor:
        """The values' check's per-sequence flags the kernels read (CHECKED), else any int32
        tensor standing in (never read)."""
        return self.context_lens if self.value_check is None else self.value_check.flags


# Recorded steps by decode_steps.step_key (kernels.step_replay): the launches of a call
# signature seen before, launched again without the checks, plan and launch keys of the whole
# path.  Emptied when full.
_STEPS: dict[tuple, step_replay.Step] = {}
_STEPS_KEPT = 256


def _keep_step(key: tuple, step: step_replay.Step | None) -> None:
    if step is None:
        return
    if len(_STEPS) >= _STEPS_KEPT:
        _STEPS.clear()
    _STEPS[key] = step


def _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                     softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale,
                     check_values: bool) -> DecodeProblem:
    """Every argument, before anything is launched (kernels.validation's checks); the values of
    cache_seqlens and block_table only with `check_values` (one read back to the host)."""
    target = current_target()
    layout = checked_layout((q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new), target)
    device = q.device
    check_flag("check_values", check_values)
    check_flag("causal", causal)
    window = NO_WINDOW if window_size is NO_WINDOW else check_window_size(window_size)
    causal, band = resolve_window(window, causal, layout.seq_q, layout.capacity)
    check_alibi_slopes(alibi_slopes, layout.batch, layout.heads, device)
    descales = (check_descale("k_descale", k_descale, k_cache.dtype),
                check_descale("v_descale", v_descale, k_cache.dtype))
    scale = 1.0 / math.sqrt(layout.head_dim) if sm_scale is None else check_sm_scale(sm_scale)
    splits, softcap = check_num_splits(num_splits), check_optional_softcap(softcap)
    # Last, once every other argument is known good: the values' check is launched, not yet read.
    context_lens, slopes, pending = _call_tensors(layout, cache_seqlens, block_table, alibi_slopes,
                                                  k_cache.shape[0], check_values)
    return DecodeProblem(layout, block_table, context_lens, causal, band, softcap, slopes, scale, descales,
                         k_cache.dtype in FP8, splits, target, pending)


def _call_tensors(layout: Layout, cache_seqlens, block_table, alibi_slopes, num_pages: int, check_values: bool):
    """The tensors a call makes from its arguments (checked ones): the context lengths L_b
    (int32, contiguous), the ALiBi slopes contiguous, and the values' check, started (None
    without check_values)."""
    pending = value_check.start(cache_seqlens, layout.appended, layout.capacity, block_table, num_pages,
                                layout.page_size) if check_values else None
    context_lens = cache_seqlens + layout.appended if layout.appended else cache_seqlens.contiguous()
    return context_lens, contiguous(alibi_slopes), pending


def _roles(tensors: tuple, context_lens, pending, slopes, out, lse) -> tuple:
    """A call's own tensors, in the order its steps name them (kernels.step_replay): its
    arguments (q, caches, lengths, new tokens, block table), the tensors made from them
    (_call_tensors), its outputs."""
    q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, _ = tensors
    flags = None if pending is None else pending.flags
    return q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, context_lens, flags, slopes, out, lse


def _new_outputs(q, batch: int, heads: int, seq_q: int):
    """out (B, Sq, H, D) like q, lse (B, H, Sq) fp32."""
    return (new_output(q.shape, q.dtype, q.device),
            new_output((batch, heads, seq_q), torch.float32, q.device))


def _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem: DecodeProblem, block_d: int) -> None:
    """k_new, v_new written to the cache at positions cache_seqlens[b] .. + Sq - 1, in place."""
    if k_new.numel() == 0:
        return
    layout, (table, *table_strides) = problem.layout, problem.table_args()
    launch(append_kernel, ceil_div(layout.seq_q, APPEND_TOKENS), layout.batch * layout.kv_heads,
           k_new, v_new, k_cache, v_cache, table, cache_seqlens, problem.value_flags(),
           *k_new.stride(), *v_new.stride(), *k_cache.stride(), *v_cache.stride(), *table_strides,
           layout.kv_heads, layout.seq_q, layout.page_size, head_dim_bound(layout.head_dim, block_d),
           layout.batch, BLOCK_M=APPEND_TOKENS, BLOCK_D=block_d, CHECKED=problem.value_check is not None,
           PAGED=layout.paged)


def _attend(q, k_cache, v_cache, problem: DecodeProblem):
    """out (B, Sq, H, D) like q, lse (B, H, Sq) fp32: the splits, then their merge (none
    after a single split)."""
    layout, interpreted = problem.layout, problem.target.interpreted
    kv_heads, batch_heads = layout.kv_heads, layout.batch * layout.kv_heads
    out, lse = _new_outputs(q, layout.batch, layout.heads, layout.seq_q)
    if out.numel() == 0:
        return out, lse
    plan = launch_plan(q.dtype, layout.head_dim, batch_heads, problem.rows, layout.capacity, problem.num_splits,
                       problem.dequantize, layout.paged, q.device, problem.target)
    one_split = plan.splits == 1
    if one_split:  # the split kernel writes out and lse itself (kernels.decode_forward): no scratch
        partial_out, partial_lse, partial_strides = out, lse, (0, 0, 0, 0)
    else:
        # Scratch (B, Hkv, splits, rows, D) and (B, Hkv, splits, rows), fp32: every element is
        # written by the program of its (row tile, split), an empty split's too (0, -inf).
        partial_out = new_output(plan.scratch, torch.float32, q.device)
        partial_lse = new_output(plan.scratch[:2], torch.float32, q.device)
        partial_strides = (*partial_out.stride(), partial_lse.stride(0))
    table, *table_strides = problem.table_args()
    record_launch("decode_split", plan.split_config)
    launch(decode_split_kernel, plan.split_blocks, batch_heads,
           q, k_cache, v_cache, table, problem.context_lens, problem.value_flags(), partial_out,
           partial_lse, out, lse,
           problem.sm_scale, *problem.descales,
           *q.stride(), *k_cache.stride(), *v_cache.stride(), *table_strides, *partial_strides,
           *out.stride(), *lse.stride(),
           kv_heads, problem.group, layout.seq_q, layout.page_size, plan.split_head_dim, plan.splits,
           *problem.score_args(),
           BLOCK_D=plan.block_d, INTERPRETED=interpreted, ONE_SPLIT=one_split, **problem.kernel_flags(), **plan.split)
    if one_split:
        return out, lse
    record_launch("decode_merge", plan.merge_config)
    launch(decode_merge_kernel, plan.merge_blocks, batch_heads,
           partial_out, partial_lse, out, lse, *partial_strides, *out.stride(), *lse.stride(),
           kv_heads, problem.group, layout.seq_q, plan.merge_head_dim, plan.splits,
           INTERPRETED=interpreted, **plan.merge)
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
    tensors = (q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, alibi_slopes)
    options = (causal, window_size, softcap, sm_scale, num_splits, return_log_normalizer, k_descale, v_descale,
               check_values)
    key = decode_steps.step_key(tensors, options)
    step = None if key is None else _STEPS.get(key)
    if step is not None:  # a signature seen before: its launches again, with this call's tensors
        layout, configs = step.data
        context_lens, slopes, pending = _call_tensors(layout, cache_seqlens, block_table, alibi_slopes,
                                                      k_cache.shape[0], check_values)
        out, lse = _new_outputs(q, layout.batch, layout.heads, layout.seq_q)
        step_replay.launch(step, _roles(tensors, context_lens, pending, slopes, out, lse), q.device)
        for kernel, config in configs:
            record_launch(kernel, config)
    else:
        problem = _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                                   softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale, check_values)
        check_flag("return_log_normalizer", return_log_normalizer)
        with replay.recording() as launches, recorded_launches() as configs:
            if k_new is not None:
                _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem,
                        padded_head_dim(problem.layout.head_dim, q.dtype))
            out, lse = _attend(q, k_cache, v_cache, problem)
        pending = problem.value_check
        if key is not None:
            roles = _roles(tensors, problem.context_lens, pending, problem.alibi_slopes, out, lse)
            _keep_step(key, step_replay.record(launches, roles, (problem.layout, tuple(configs.items()))))
    if pending is not None:
        value_check.finish(pending)  # raises where a value leaves the cache
    return (out, lse) if return_log_normalizer else out
