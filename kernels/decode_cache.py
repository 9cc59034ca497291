"""The KV cache of kv_cache_attention: where a key position lives, and the append of new tokens.

One layout serves both kinds of cache.  A paged cache is (num_pages, page_size, Hkv, D)
with a block table (B, max_pages): key position j of sequence b lives in physical page
block_table[b, j // page_size], slot j % page_size.  A contiguous cache (B, Smax, Hkv, D)
is the paged one with page_size = Smax and a table [b] per sequence b, which the kernels
know without reading one (PAGED False: cache_slots), so both share every other line.  The
page size is a run-time value (1, 16, a size that divides no length, ...): each key finds
its own page, per key, not per tile.

Every row of a cache (one position of one kv head) is addressed by its element offset,
so the kernels read and write rows through the tensors' own strides, never copying them.
"""

import triton
import triton.language as tl

from .blocks import below, head_offset, load_tile, program_coordinates


def table_arguments(table, stand_in) -> tuple:
    """BLOCK_TABLE, stride_tb, stride_tp as the kernels here take them: a paged cache's block
    table and its strides, or for a contiguous cache (table None, the kernels' PAGED False),
    which no kernel reads a table of, `stand_in` (any int32 tensor of the call) and strides 0."""
    return (stand_in, 0, 0) if table is None else (table, *table.stride())


@triton.jit
def cache_slots(TABLE_ROW, positions, length, page_size, stride_table_page, sequence, PAGED: tl.constexpr):
    """(page, slot) of key positions `positions` of sequence `sequence` (int64), its block-table
    row at TABLE_ROW.  Only positions below the sequence's `length` read the table: its
    entries past them may hold anything (-1 padding, stale pages), so the others get page 0,
    which exists, and slot j % page_size, inside it; no kernel uses what they load.
    A contiguous cache (not PAGED) is the sequence's own page, read without its table (one
    dependent load less in front of every key tile's gather) and without a division per key;
    positions past `length` read its slot 0, which exists even where they pass Smax."""
    if PAGED:
        page_index = positions // page_size
        pages = tl.load(TABLE_ROW + page_index * stride_table_page, mask=positions < length, other=0).to(tl.int64)
        slots = (positions % page_size).to(tl.int64)
    else:
        pages = sequence.to(tl.int64)
        slots = tl.where(positions < length, positions, 0).to(tl.int64)
    return pages, slots


@triton.jit
def slot_offsets(pages, slots, stride_page, stride_slot):
    """Element offsets of cache rows (page, slot) within one kv head of a cache tensor."""
    return pages * stride_page + slots * stride_slot


@triton.jit
def gather_rows(base, row_offsets, row_mask, dims, stride_d, head_dim):
    """The [rows, BLOCK_D] tile of rows at element offsets `row_offsets` from base; rows
    outside row_mask and columns at or past head_dim (None: none) read 0."""
    ptrs = base + row_offsets[:, None] + dims[None, :] * stride_d
    return tl.load(ptrs, mask=row_mask[:, None] & below(dims, head_dim)[None, :], other=0.0)


@triton.jit
def scatter_rows(base, tile, row_offsets, row_mask, dims, stride_d, head_dim):
    """Store tile (already in base's dtype) to the rows at element offsets `row_offsets`,
    skipping rows outside row_mask and the head-dim padding."""
    ptrs = base + row_offsets[:, None] + dims[None, :] * stride_d
    tl.store(ptrs, tile, mask=row_mask[:, None] & below(dims, head_dim)[None, :])


@triton.jit
def append_rows(NEW, CACHE, batch, kv_head, tokens, pages, slots, dims,
                stride_nb, stride_nm, stride_nh, stride_nd, stride_cp, stride_cs, stride_ch, stride_cd,
                seq_q, head_dim):
    """Copy new tokens `tokens` of one (sequence, kv head) of NEW (B, Sq, Hkv, D) to their
    cache rows (pages, slots): the same dtype both sides, so the bits are copied as they are."""
    rows = load_tile(NEW + head_offset(batch, kv_head, stride_nb, stride_nh), tokens, dims,
                     stride_nm, stride_nd, seq_q, head_dim)
    scatter_rows(CACHE + kv_head.to(tl.int64) * stride_ch, rows, slot_offsets(pages, slots, stride_cp, stride_cs),
                 tokens < seq_q, dims, stride_cd, head_dim)


# The value check's flags append_kernel loads at a time (one per sequence of the batch).
FLAGS_PER_STEP = tl.constexpr(1024)


@triton.jit
def any_flagged(FLAGS, count, BLOCK: tl.constexpr):
    """Whether any of the `count` int32 flags at FLAGS is set."""
    flagged = 0
    for start in range(0, count, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        flagged = tl.maximum(flagged, tl.max(tl.load(FLAGS + offsets, mask=offsets < count, other=0), axis=0))
    return flagged != 0


@triton.jit(do_not_specialize=["kv_heads", "seq_q", "page_size", "batch_size", "first_batch_head"])
def append_kernel(
    K_NEW, V_NEW, K_CACHE, V_CACHE, BLOCK_TABLE, CACHE_SEQLENS, OUTSIDE,
    stride_knb, stride_knm, stride_knh, stride_knd,
    stride_vnb, stride_vnm, stride_vnh, stride_vnd,
    stride_kp, stride_ks, stride_kh, stride_kd,
    stride_vp, stride_vs, stride_vh, stride_vd,
    stride_tb, stride_tp,
    kv_heads, seq_q, page_size, head_dim, batch_size,
    first_batch_head,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, CHECKED: tl.constexpr, PAGED: tl.constexpr,
):
    """k_new, v_new (B, Sq, Hkv, D) written to cache positions cache_seqlens[b] + i of
    sequence b, one program per (BLOCK_M new tokens, sequence x kv head).  Nothing else of
    the caches is touched.  CHECKED: OUTSIDE holds cache_values_kernel's answer for the
    `batch_size` sequences, and where any sequence's values leave the cache nothing is
    written at all (the call raises once it reads the answer: the cache stays as it was)."""
    if CHECKED:
        if any_flagged(OUTSIDE, batch_size, FLAGS_PER_STEP):
            return
    block, _, batch, kv_head, _ = program_coordinates(kv_heads, 1, first_batch_head)
    tokens = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    cache_len = tl.load(CACHE_SEQLENS + batch)
    positions = cache_len + tokens
    pages, slots = cache_slots(BLOCK_TABLE + batch.to(tl.int64) * stride_tb, positions, cache_len + seq_q,
                               page_size, stride_tp, batch, PAGED)
    append_rows(K_NEW, K_CACHE, batch, kv_head, tokens, pages, slots, dims,
                stride_knb, stride_knm, stride_knh, stride_knd, stride_kp, stride_ks, stride_kh, stride_kd,
                seq_q, head_dim)
    append_rows(V_NEW, V_CACHE, batch, kv_head, tokens, pages, slots, dims,
                stride_vnb, stride_vnm, stride_vnh, stride_vnd, stride_vp, stride_vs, stride_vh, stride_vd,
                seq_q, head_dim)


@triton.jit(do_not_specialize=["appended", "capacity", "num_pages", "page_size", "first_batch_head"])
def cache_values_kernel(
    CACHE_SEQLENS, BLOCK_TABLE, OUTSIDE, stride_tb, stride_tp,
    appended, capacity, num_pages, page_size,
    first_batch_head,
    PAGED: tl.constexpr, BLOCK: tl.constexpr,
):
    """OUTSIDE[b] = 1 where sequence b's values leave the cache, else 0, one program per
    sequence: its length L_b below 0 or, with `appended` new tokens after it, past the cache's
    `capacity` positions; PAGED, an entry of the block table it reaches (the first
    ceil((L_b + appended) / page_size)) outside [0, num_pages).  What kernels.validation's
    check_cache_values checks, without a read back per reduction: the host reads OUTSIDE
    once, after the call's other kernels are queued (kernels.value_check), which read it
    first: append_kernel and decode_split_kernel leave flagged values unread.
    first_batch_head: kernels.launch's, for axis 1, which has one slice here."""
    batch = tl.program_id(0)
    length = tl.load(CACHE_SEQLENS + batch).to(tl.int64)
    outside = ((length < 0) | (length + appended > capacity)).to(tl.int32)
    if PAGED:
        reached = tl.cdiv(tl.minimum(tl.maximum(length + appended, 0), capacity), page_size)
        table_row = BLOCK_TABLE + batch.to(tl.int64) * stride_tb
        for start in range(0, reached, BLOCK):
            pages = start + tl.arange(0, BLOCK)
            entries = tl.load(table_row + pages * stride_tp, mask=pages < reached, other=0)
            outside = tl.maximum(outside, tl.max(((entries < 0) | (entries >= num_pages)).to(tl.int32), axis=0))
    tl.store(OUTSIDE + batch, outside)
