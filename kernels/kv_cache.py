"""`kv_cache_attention`: FlashAttention-2's `flash_attn_with_kvcache`, forward only.

A few new query tokens per sequence attend to that sequence's cached keys and values,
optionally after appending their own (k_new, v_new) to the cache in place.  The cache is
contiguous (B, Smax, Hkv, D) or paged (num_pages, page_size, Hkv, D) through a block
table; both run one kernel (kernels.decode_cache says how).  The keys are split into
contiguous runs (FlashDecoding): a few query rows per sequence give few programs, and the
splits give the device enough of them; a merge kernel combines the splits
(kernels.decode_forward).

Validation reuses kernels.validation, allocation kernels.allocation (the scratch too, so
poisoned outputs show every element a program leaves unwritten), launching kernels.launch
with the launch tables' "decode_split" and "decode_merge" roles (kernels.tuning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from .allocation import new_output
from .decode_cache import append_kernel
from .decode_forward import decode_merge_kernel, decode_split_kernel
from .flash import contiguous
from .launch import head_dim_bound, launch, launch_kwargs, launches_on_device, padded_head_dim
from .problem import resolve_window, score_arguments
from .targets import current_target, interpreting
from .validation import (
    DTYPE_NAMES,
    FP8,
    HIGH_PRECISION,
    check_alibi_slopes,
    check_block_table,
    check_cache_seqlens,
    check_cache_values,
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

# The most splits the heuristic picks (num_splits=0): past that the merge's reads cost more
# than the programs they buy.
MAX_SPLITS = 16
# The processors the heuristic fills where no GPU answers: Triton's CPU interpreter (a
# stand-in that still gives a small batch several splits, so that path is the one tested)
# and compile-only launches (CPU tensors standing in for a GPU's).
STAND_IN_PROCESSORS = 8
# New tokens per program of the append: a copy, no table of its own.
APPEND_TOKENS = 16
_CACHE_AXES = "(batch, seqlen_cache, kv_heads, head_dim) or, paged, (num_pages, page_size, kv_heads, head_dim)"


@dataclass(frozen=True, eq=False)
class DecodeProblem:
    """One validated call: shapes; the block table (B, max_pages) int32 and page size the
    kernels address the cache by; the context lengths L_b (int32 on the device, and the
    capacity per sequence, which bounds them: the host never reads the lengths); the mask and
    score options as kernels.problem resolves them; the fp8 scales."""

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
        """The split kernel's constexpr flags: the mask, the score variants, an fp8 cache."""
        return dict(CAUSAL=self.causal, WINDOW=self.band is not None, SOFTCAP=self.softcap is not None,
                    ALIBI=self.alibi_slopes is not None, DEQUANTIZE=self.dequantize)


def _check_tensors(q, k_cache, v_cache) -> None:
    """q (B, Sq, H, D) in fp16/bf16/fp32 on the target's device; the caches 4-D, alike, in
    q's dtype or fp8 (where the target converts fp8), one head dim, kv heads dividing H."""
    check_tensor("q", q, rank=4, dtypes=HIGH_PRECISION, axes="(batch, seqlen_q, heads, head_dim)")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, cache, rank=4, dtypes=DTYPE_NAMES, axes=_CACHE_AXES)
    check_same({"q": q, "k_cache": k_cache, "v_cache": v_cache}, "device")
    check_same({"k_cache": k_cache, "v_cache": v_cache}, "dtype")
    target = current_target()
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


def _cache_table(k_cache, block_table, batch: int, device) -> tuple[torch.Tensor, int, int, bool]:
    """(block table, page size, capacity per sequence, paged): a contiguous cache is one page
    of Smax positions per sequence, sequence b's page b."""
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(f"k_cache: expected batch size {batch} (from q) for a contiguous cache, "
                             f"got {k_cache.shape[0]} (pass block_table for a paged one)")
        table = torch.arange(batch, dtype=torch.int32, device=device)[:, None]
        return table, max(k_cache.shape[1], 1), k_cache.shape[1], False
    check_block_table(block_table, batch, device)
    page_size = k_cache.shape[1]
    if page_size == 0:
        raise ValueError("k_cache: expected pages of at least one position, got page_size 0")
    return block_table, page_size, block_table.shape[1] * page_size, True


def _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                     softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale,
                     check_values: bool) -> DecodeProblem:
    """Every argument, before anything is launched (kernels.validation's checks); the values of
    cache_seqlens and block_table only with `check_values` (one read back to the host)."""
    _check_tensors(q, k_cache, v_cache)
    batch, seq_q, heads, head_dim = q.shape
    kv_heads, device = k_cache.shape[2], q.device
    table, page_size, capacity, paged = _cache_table(k_cache, block_table, batch, device)
    appended = seq_q if check_new_kv(k_new, v_new, (batch, seq_q, kv_heads, head_dim), k_cache.dtype, device) else 0
    check_cache_seqlens(cache_seqlens, batch, device)
    check_flag("check_values", check_values)
    if check_values:
        check_cache_values(cache_seqlens, appended, capacity, table if paged else None, k_cache.shape[0], page_size)
    check_flag("causal", causal)
    causal, band = resolve_window(check_window_size(window_size), causal, seq_q, capacity)
    slopes = contiguous(check_alibi_slopes(alibi_slopes, batch, heads, device))
    descales = tuple(check_descale(name, descale, k_cache.dtype)
                     for name, descale in (("k_descale", k_descale), ("v_descale", v_descale)))
    return DecodeProblem(batch, heads, kv_heads, seq_q, head_dim, table, page_size,
                         cache_seqlens + appended if appended else cache_seqlens.contiguous(), capacity, causal, band,
                         check_optional_softcap(softcap), slopes,
                         1.0 / math.sqrt(head_dim) if sm_scale is None else check_sm_scale(sm_scale),
                         descales, k_cache.dtype in FP8, check_num_splits(num_splits))


def processors(device: torch.device) -> int:
    """How many programs the device runs at once, one per multiprocessor (CU on AMD): what
    the split heuristic fills; STAND_IN_PROCESSORS where no GPU answers."""
    if launches_on_device() and device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return STAND_IN_PROCESSORS


def split_count(requested: int, programs: int, capacity: int, block_n: int, available: int) -> int:
    """The splits of every sequence's keys: `requested` where >= 1; else (0) enough that the
    `programs` without splits, times the splits, fill the `available` processors once, at
    most MAX_SPLITS and at most the key tiles of the cache's capacity per sequence (a split of
    at least one tile where a sequence fills it; the lengths themselves stay on the device),
    at least 1."""
    if requested:
        return requested
    return max(1, min(MAX_SPLITS, triton.cdiv(available, max(programs, 1)), triton.cdiv(capacity, block_n)))


def row_tile(rows: int, block_m: int) -> int:
    """BLOCK_M of a program: the table's, or fewer where a (sequence, kv head) has fewer rows
    (a power of two >= 16, tl.dot's least); a smaller tile never takes more shared memory or
    registers than the table's, which is what each target's table was fitted to."""
    return min(block_m, max(16, triton.next_power_of_2(rows)))


def _split_launch(problem: DecodeProblem, block_d: int, dtype: torch.dtype) -> dict:
    cfg = launch_kwargs("decode_split", block_d, dtype)
    if problem.dequantize:
        # Head slices are multiplied as stored; an fp8 cache is dequantised on whole tiles.
        cfg.pop("HEAD_CHUNK", None)
    return {**cfg, "BLOCK_M": row_tile(problem.rows, cfg["BLOCK_M"])}


def _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem: DecodeProblem, block_d: int) -> None:
    """k_new, v_new written to the cache at positions cache_seqlens[b] .. + Sq - 1, in place."""
    if k_new.numel() == 0:
        return
    launch(append_kernel, triton.cdiv(problem.seq_q, APPEND_TOKENS), problem.batch * problem.kv_heads,
           k_new, v_new, k_cache, v_cache, problem.block_table, cache_seqlens,
           *k_new.stride(), *v_new.stride(), *k_cache.stride(), *v_cache.stride(), *problem.block_table.stride(),
           problem.kv_heads, problem.seq_q, problem.page_size, head_dim_bound(problem.head_dim, block_d),
           BLOCK_M=APPEND_TOKENS, BLOCK_D=block_d)


def _attend(q, k_cache, v_cache, problem: DecodeProblem):
    """out (B, Sq, H, D) like q, lse (B, H, Sq) fp32: the splits, then their merge."""
    batch, kv_heads, rows = problem.batch, problem.kv_heads, problem.rows
    out = new_output(q.shape, q.dtype, q.device)
    lse = new_output((batch, problem.heads, problem.seq_q), torch.float32, q.device)
    if out.numel() == 0:
        return out, lse
    block_d = padded_head_dim(problem.head_dim, q.dtype)
    cfg = _split_launch(problem, block_d, q.dtype)
    row_tiles = triton.cdiv(rows, cfg["BLOCK_M"])
    splits = split_count(problem.num_splits, batch * kv_heads * row_tiles, problem.capacity, cfg["BLOCK_N"],
                         processors(q.device))
    # Scratch (B, Hkv, splits, rows, D) and (B, Hkv, splits, rows), fp32: every element is
    # written by the program of its (row tile, split), an empty split's too (0, -inf).
    partial_out = new_output((batch * kv_heads * splits, rows, problem.head_dim), torch.float32, q.device)
    partial_lse = new_output((batch * kv_heads * splits, rows), torch.float32, q.device)
    partial_strides = (*partial_out.stride(), partial_lse.stride(0))
    launch(decode_split_kernel, row_tiles * splits, batch * kv_heads,
           q, k_cache, v_cache, problem.block_table, problem.context_lens, partial_out, partial_lse,
           problem.sm_scale, *problem.descales,
           *q.stride(), *k_cache.stride(), *v_cache.stride(), *problem.block_table.stride(), *partial_strides,
           kv_heads, problem.group, problem.seq_q, problem.page_size, head_dim_bound(problem.head_dim, block_d, cfg),
           splits, *problem.score_args(),
           BLOCK_D=block_d, INTERPRETED=interpreting(), **problem.kernel_flags(), **cfg)

    merge = launch_kwargs("decode_merge", block_d, q.dtype, tiles=("BLOCK_M",))
    merge["BLOCK_M"] = row_tile(rows, merge["BLOCK_M"])
    launch(decode_merge_kernel, triton.cdiv(rows, merge["BLOCK_M"]), batch * kv_heads,
           partial_out, partial_lse, out, lse, *partial_strides, *out.stride(), *lse.stride(),
           kv_heads, problem.group, problem.seq_q, head_dim_bound(problem.head_dim, block_d), splits,
           BLOCK_D=block_d, INTERPRETED=interpreting(), **merge)
    return out, lse


def kv_cache_attention(q, k_cache, v_cache, cache_seqlens, *, block_table=None, k_new=None, v_new=None,
                       causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, sm_scale=None,
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
    num_splits: 0 lets the kernel choose (kv_cache.split_count); n >= 1 splits every sequence's
        keys into n runs of whole key tiles, merged by log-sum-exp.
    return_log_normalizer: also return lse (batch, heads, seqlen_q) fp32.
    check_values: check cache_seqlens' and block_table's values before launching (a length
        beyond the cache, a page index outside it: a clear error instead of a read or write
        out of bounds).  It costs one read back to the host, which waits for the GPU work
        queued before the call; False skips it, for a serving loop that builds its own tables
        (FlashAttention-2's and vLLM's kernels never check) -- bad values then read and write
        wherever they point.  Shapes, dtypes and devices are checked either way.

    Rows that see no key (L_b = 0, or all masked) give out 0 and lse -inf.  Returns out
    (batch, seqlen_q, heads, head_dim) in q's dtype, or (out, lse).  Forward only.
    """
    problem = _check_arguments(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, causal, window_size,
                               softcap, alibi_slopes, sm_scale, num_splits, k_descale, v_descale, check_values)
    check_flag("return_log_normalizer", return_log_normalizer)
    if k_new is not None:
        _append(k_new, v_new, k_cache, v_cache, cache_seqlens, problem, padded_head_dim(problem.head_dim, q.dtype))
    out, lse = _attend(q, k_cache, v_cache, problem)
    return (out, lse) if return_log_normalizer else out
