"""kv_cache_attention's checks of its tensors' shapes, dtypes and devices (not their values:
kernels.value_check), once per call signature.

What the checks find -- batch, lengths, heads, page size, the capacity per sequence, whether the
cache is paged and how many new tokens are appended -- is the call's layout (_Layout).  A decode
loop passes tensors of one signature step after step, and the forty-odd type, shape, dtype and
device checks cost more host time than looking their signature up; a signature not seen before
(anything changed, a bad argument) is checked in full, so every error is raised as it was.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .launch import launches_on_device
from .targets import Target
from .validation import (
    DTYPE_NAMES,
    FP8,
    HIGH_PRECISION,
    check_block_table,
    check_cache_seqlens,
    check_dtype_supported,
    check_device,
    check_head_dim,
    check_new_kv,
    check_same,
    check_tensor,
)

_CACHE_AXES = "(batch, seqlen_cache, kv_heads, head_dim) or, paged, (num_pages, page_size, kv_heads, head_dim)"


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
    positions per sequence, sequence b's page b (kernels.decode_cache.cache_slots)."""
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


class Layout(NamedTuple):
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


def _check_layout(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, target: Target) -> Layout:
    """The tensors' checks, in the order the arguments are checked: q and the caches, the block
    table, the new tokens, the lengths."""
    _check_tensors(q, k_cache, v_cache, target)
    batch, seq_q, heads, head_dim = q.shape
    kv_heads, device = k_cache.shape[2], q.device
    page_size, capacity, paged = _cache_pages(k_cache, block_table, batch, device)
    appended = seq_q if check_new_kv(k_new, v_new, (batch, seq_q, kv_heads, head_dim), k_cache.dtype, device) else 0
    check_cache_seqlens(cache_seqlens, batch, device)
    return Layout(batch, seq_q, heads, head_dim, kv_heads, page_size, capacity, paged, appended)


# Layouts that passed _check_layout, by everything it reads (_signature): a decode loop passes
# tensors of one signature step after step, and the forty-odd type, shape, dtype and device
# checks cost more host time than looking their signature up.  A signature not seen before
# (anything changed, a bad argument) is checked in full, so every error is raised as it was.
# Emptied when full.
_CHECKED_LAYOUTS: dict[tuple, Layout] = {}
_LAYOUTS_KEPT = 256


def _signature(tensors: tuple, target: Target) -> tuple:
    """What _check_layout reads of `tensors` (q first): each one's shape, dtype and device (its
    type where it is no tensor), whether q would need a backward, the target, and whether
    launches go to the device."""
    q = tensors[0]
    needs_grad = isinstance(q, torch.Tensor) and q.requires_grad and torch.is_grad_enabled()
    return (*[(t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t) for t in tensors],
            needs_grad, target, launches_on_device())


def checked_layout(tensors: tuple, target: Target) -> Layout:
    """_check_layout(*tensors, target), once per signature (the module docstring says why)."""
    signature = _signature(tensors, target)
    layout = _CHECKED_LAYOUTS.get(signature)
    if layout is None:
        layout = _check_layout(*tensors, target)
        if len(_CHECKED_LAYOUTS) >= _LAYOUTS_KEPT:
            _CHECKED_LAYOUTS.clear()
        _CHECKED_LAYOUTS[signature] = layout
    return layout
