"""flash_attention_varlen's call: the padded case tensors packed into FlashAttention-2's
variable-length form, and its results unpacked back.

A varlen case's inputs are drawn like any case's, as padded (B, H, Smax, D) tensors
(`conformance.cases.inputs`), B = the number of sequences. Sequence b's real rows are its
first len_q[b] query rows and len_k[b] key rows (conformance.cases.variants.sequence_lengths);
the rest is padding, which the implementation never sees:

    call     q (total_q, H, D), k and v (total_k, Hkv, D): the real rows of every sequence,
             in order, gathered from the padded leaves (a differentiable gather, so a backward
             case's gradients land on the padded leaves, 0 on padding); int32 cu_seqlens_q/k
             of length B + 1; max_seqlen_q/k = the case's Sq/Sk (reached by some sequence)
    outputs  out (total_q, H, D) scattered back into zeros of (B, H, Smax, D); lse
             (H, total_q) into -inf of (B, H, Smax)

The reference and torch paths run on the padded tensors with the lengths (reference.variants),
where padding rows are rows that see no key: out 0, lse -inf, gradients 0. So every padding
position of the unpacked result equals the reference's exactly (error 0: padding can create
no error), and every element the implementation returned is at a real position, judged as
any other (padding can hide none). Padding query rows are not rows of the problem: the
declared lse of empty rows (+inf) applies to real rows only (`padding_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.cases.catalog import Case
from conformance.cases.variants import sequence_lengths


@dataclass(frozen=True)
class Packing:
    """Where each sequence's rows are: padded (batch, row) index pairs of the packed rows, in
    packed order, and FlashAttention-2's cumulative offsets, for queries and for keys."""

    query_index: tuple   # (batch indices, row indices), each (total_q,) int64
    key_index: tuple     # (batch indices, row indices), each (total_k,) int64
    cu_seqlens_q: torch.Tensor  # (B + 1,) int32
    cu_seqlens_k: torch.Tensor


def _index(lengths, device) -> tuple:
    lengths = torch.tensor(lengths, dtype=torch.int64, device=device)
    batch = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    rows = torch.arange(batch.numel(), device=device) - starts[batch]
    return batch, rows


def _cumulative(lengths, device) -> torch.Tensor:
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def packing(case: Case, device) -> Packing:
    len_q, len_k = sequence_lengths(case)
    return Packing(_index(len_q, device), _index(len_k, device), _cumulative(len_q, device),
                   _cumulative(len_k, device))


def pack(padded: torch.Tensor, index: tuple) -> torch.Tensor:
    """(B, H, Smax, D) -> (total, H, D): the real rows, contiguous, differentiable."""
    return padded.transpose(1, 2)[index].contiguous()


def unpack_rows(packed, index: tuple, case: Case, heads: int, name: str) -> torch.Tensor:
    """(total, heads, D) -> (B, heads, Smax, D) with zeros at padding (differentiable);
    TypeError (the output contract) on a wrong shape."""
    total = index[0].numel()
    if not isinstance(packed, torch.Tensor) or packed.dim() != 3 or tuple(packed.shape[:2]) != (total, heads):
        got = tuple(packed.shape) if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"{name} of flash_attention_varlen: expected shape ({total}, {heads}, head_dim) "
                        f"(total_q, heads, head_dim), got {got}")
    padded = packed.new_zeros((case.batch, case.seq_q, heads, packed.shape[2]))
    return padded.index_put(index, packed).transpose(1, 2)


def unpack_lse(packed, index: tuple, case: Case) -> torch.Tensor:
    """(H, total_q) -> (B, H, Smax) with -inf at padding (the reference's value there);
    TypeError on a wrong shape."""
    total = index[0].numel()
    if not isinstance(packed, torch.Tensor) or tuple(packed.shape) != (case.heads, total):
        got = tuple(packed.shape) if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise TypeError(f"lse of flash_attention_varlen: expected shape ({case.heads}, {total}) "
                        f"(heads, total_q), got {got}")
    padded = packed.new_full((case.batch, case.seq_q, case.heads), float("-inf"))
    return padded.index_put(index, packed.transpose(0, 1)).transpose(1, 2)


def padding_rows(case: Case, device) -> torch.Tensor:
    """(B, 1, Smax) bool: the padding query rows of a varlen case (broadcasts over heads)."""
    len_q = torch.tensor(sequence_lengths(case)[0], dtype=torch.int64, device=device)
    return (torch.arange(case.seq_q, device=device)[None, :] >= len_q[:, None]).unsqueeze(1)


def real_positions(tensor: torch.Tensor, case: Case, kind: str) -> torch.Tensor:
    """`tensor` (B, heads, Smax, ...) with its padding rows set to 0 (`kind` "q" or "kv"):
    what the implementation is given, for sizes measured over the inputs."""
    lengths = sequence_lengths(case)[0 if kind == "q" else 1]
    lengths = torch.tensor(lengths, dtype=torch.int64, device=tensor.device)
    padding = torch.arange(tensor.shape[2], device=tensor.device)[None, :] >= lengths[:, None]
    return tensor.masked_fill(padding[:, None, :, None], 0)
