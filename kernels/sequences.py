"""Variable-length batches (flash_attention_varlen): where a program's sequence lies.

The sequences of a varlen batch are packed one after another along the token axis of
q (total_q, H, D) and k, v (total_k, Hkv, D); cu_seqlens_q / cu_seqlens_k (B + 1 int32
offsets) say where each one starts.  The kernels run one program per (tile, head) of
the tiles that hold tokens, which a tile list names (kernels.packed_tiles; without one,
under CUDA graph capture, one per (tile, sequence x head) over the longest sequence's
tiles, where programs past their sequence's last tile return at once): a program reads
its sequence's first token and length here, moves its base pointers to that token, and
from then on works exactly as the dense kernel does on a (1, H, Sq_b, D) problem -- rows
and keys are positions within the sequence, so masks, ALiBi distances and the dropout
counters are the dense operator's for that sequence alone.

Per-row statistics (lse, delta) of a varlen batch are laid out (H, total_q) fp32,
FlashAttention-2's varlen layout; dense ones (B, H, Sq).
"""

import triton
import triton.language as tl


@triton.jit
def sequence_span(CU_SEQLENS, batch):
    """(first token, length) of sequence `batch` of a packed batch."""
    first = tl.load(CU_SEQLENS + batch)
    return first, tl.load(CU_SEQLENS + batch + 1) - first


@triton.jit
def at_token(base, token, stride_token):
    """base moved to token `token` (int64 offsets: packed batches can be huge)."""
    return base + token.to(tl.int64) * stride_token


@triton.jit
def row_stats(base, batch_head, head, seq_q, first_token, total_tokens, VARLEN: tl.constexpr):
    """Where one (batch, head)'s per-row statistics start: dense (B, H, Sq) rows, or the
    sequence's span of head `head` in the varlen (H, total_q) layout."""
    if VARLEN:
        start = base + head.to(tl.int64) * total_tokens + first_token
    else:
        start = base + batch_head.to(tl.int64) * seq_q
    return start


@triton.jit
def streamed_rows(length, VARLEN: tl.constexpr):
    """The row count a tile_source is built with: with VARLEN at least 1, so a sequence of
    no tokens (whose loops never load) still gets a well-formed tensor descriptor."""
    if VARLEN:
        length = tl.maximum(length, 1)
    return length
