"""FlashAttention-2's attention variants in the chunked reference: sliding window, softcap,
ALiBi and per-sequence lengths (a padded variable-length batch).

With per-sequence offset off_b = len_k[b] - len_q[b] (Sk - Sq without lengths), query i of
batch b sees key j iff

    j < len_k[b] and i < len_q[b]                      (lengths: the rest is padding)
    i + off_b - left <= j <= i + off_b + right         (window (left, right); -1 = unbounded)
    j <= i + off_b                                     (causal, bottom-right; j <= i top-left)

so a causal window is the window with right = min(right, 0). The score of a visible pair is

    s = scale * q.k;   s = c * tanh(s / c)  (softcap c > 0);   s -= slope[b, h] * |i + off_b - j|  (ALiBi)

in that order, as FlashAttention-2 defines them. Everything is computed in the precision's
accumulate dtype: float64 for REFERENCE, fp32 for MATCHED, which is the kernel's precision
for scores (its tanh and its bias are fp32 arithmetic on the fp32 dot product).

Padding rows (i >= len_q[b]) are rows that see no key: out 0, lse -inf, no gradient, and
padding keys (j >= len_k[b]) are never seen, so their dK, dV are 0.

The backward of a soft-capped score carries the tanh's derivative: dS_raw = dS * (1 - t^2)
with t = tanh(s / c), which ``apply_variants`` returns when asked.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from .validation import Dims

Tensor = torch.Tensor


@dataclass(frozen=True)
class Variants:
    """The variants of one call, validated and laid out per (batch, kv head) unit.

    window: (left, right) with -1 for an unbounded side, or None.
    softcap: c > 0, or 0.0 for none.
    slopes: ALiBi slopes (U, G) in the accumulate dtype, or None.
    offsets: per unit len_k - len_q (U,) int64, or None: Sk - Sq for every unit.
    len_q, len_k: per unit lengths (U,) int64, or None: no padding.
    """

    window: Optional[Tuple[int, int]] = None
    softcap: float = 0.0
    slopes: Optional[Tensor] = None
    offsets: Optional[Tensor] = None
    len_q: Optional[Tensor] = None
    len_k: Optional[Tensor] = None
    offset_range: Tuple[int, int] = (0, 0)  # (smallest, largest) diagonal offset of any unit
    max_len_k: int = 0

    @property
    def active(self) -> bool:
        """Whether any variant is on."""
        return self.window is not None or bool(self.softcap) or self.slopes is not None or self.len_q is not None

    @property
    def relative_positions(self) -> bool:
        """Whether blocks need the key position relative to each query's diagonal."""
        return self.window is not None or self.slopes is not None or self.len_q is not None


NONE = Variants()


def _check_window(window) -> Optional[Tuple[int, int]]:
    if window is None:
        return None
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= -1 for x in window)):
        raise ValueError(f"window: expected (left, right) with ints >= -1 (-1: unbounded), got {window!r}")
    left, right = int(window[0]), int(window[1])
    return None if (left, right) == (-1, -1) else (left, right)


def _check_softcap(softcap) -> float:
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real) or not (
            math.isfinite(softcap) and softcap >= 0):
        raise ValueError(f"softcap: expected a finite number >= 0 (0: none), got {softcap!r}")
    return float(softcap)


def _lengths(name: str, values, batch: int, limit: int, device) -> Tensor:
    lengths = torch.as_tensor(values, device=device)
    if lengths.shape != (batch,) or lengths.is_floating_point() or lengths.is_complex():
        raise ValueError(f"seq_lens: {name} must be {batch} integers (one per batch), got {tuple(lengths.shape)} "
                         f"{lengths.dtype}")
    lengths = lengths.to(torch.int64)
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > limit):
        raise ValueError(f"seq_lens: {name} must lie in [0, {limit}], got {lengths.tolist()[:8]}...")
    return lengths


def check_variants(dims: Dims, device, acc: torch.dtype, window=None, softcap=None,
                   alibi_slopes: Optional[Tensor] = None,
                   seq_lens: Optional[Tuple[Sequence[int], Sequence[int]]] = None) -> Variants:
    """Validated variants laid out per unit (U = B * Hkv, G = H // Hkv): ValueError naming the argument.

    alibi_slopes: (H,) or (B, H) floating slopes (FlashAttention-2 takes fp32). seq_lens:
    (query lengths, key lengths) of the B sequences of a padded variable-length batch."""
    window, softcap = _check_window(window), _check_softcap(softcap)
    slopes = None
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, Tensor) or not alibi_slopes.is_floating_point():
            raise TypeError(f"alibi_slopes: expected a floating tensor, got {type(alibi_slopes).__name__}")
        if tuple(alibi_slopes.shape) not in ((dims.heads,), (dims.batch, dims.heads)):
            raise ValueError(f"alibi_slopes: expected shape ({dims.heads},) or ({dims.batch}, {dims.heads}), "
                             f"got {tuple(alibi_slopes.shape)}")
        # Slopes are given in fp32 (exact in float64): the reference upcasts, MATCHED keeps them.
        slopes = alibi_slopes.to(device=device, dtype=acc).expand(dims.batch, dims.heads)
        slopes = slopes.reshape(dims.units, dims.group)
    offsets = len_q = len_k = None
    offset_range, max_len_k = (dims.sk - dims.sq,) * 2, dims.sk
    if seq_lens is not None:
        if not isinstance(seq_lens, (tuple, list)) or len(seq_lens) != 2:
            raise ValueError("seq_lens: expected (query lengths, key lengths)")
        by_batch = (_lengths("query lengths", seq_lens[0], dims.batch, dims.sq, device),
                    _lengths("key lengths", seq_lens[1], dims.batch, dims.sk, device))
        len_q, len_k = (x.repeat_interleave(dims.kv_heads) for x in by_batch)  # unit u = b * Hkv + kv head
        offsets = len_k - len_q
        if offsets.numel():
            offset_range, max_len_k = (int(offsets.min()), int(offsets.max())), int(len_k.max())
    return Variants(window, softcap, slopes, offsets, len_q, len_k, offset_range, max_len_k)


def key_span(variants: Variants, dims: Dims, causal: bool, top_left: bool, rows: Tuple[int, int]) -> Tuple[int, int]:
    """Keys [first, stop) that any query row in ``rows`` of any unit may see: blocks skip the rest."""
    low_offset, high_offset = variants.offset_range
    first, stop = 0, min(dims.sk, variants.max_len_k)
    if causal:
        stop = min(stop, rows[1] + (0 if top_left else high_offset))
    if variants.window is not None:
        left, right = variants.window
        if left >= 0:
            first = max(first, rows[0] + low_offset - left)
        if right >= 0:
            stop = min(stop, rows[1] + high_offset + right)
    stop = max(stop, 0)
    return min(first, stop), stop


def apply_variants(variants: Variants, dims: Dims, causal: bool, top_left: bool, s: Tensor,
          origin: Tuple[int, int, int], want_derivative: bool = False) -> Optional[Tensor]:
    """Softcap, ALiBi and every mask, in place on the scaled scores ``s`` (n, G, rows, keys) of
    the block whose first unit, query row and key are ``origin``; invisible pairs become -inf.
    Returns the softcap's derivative 1 - tanh^2 (same shape) if ``want_derivative`` and
    softcap is on, else None."""
    n, _, rows, keys = s.shape
    unit, row, key = origin
    derivative = None
    if variants.softcap:
        t = s.div_(variants.softcap).tanh_()
        if want_derivative:
            derivative = 1.0 - t * t
        t.mul_(variants.softcap)  # s, capped
    if not (causal or variants.relative_positions):
        return derivative
    device = s.device
    i = torch.arange(row, row + rows, device=device).view(1, 1, rows, 1)
    j = torch.arange(key, key + keys, device=device).view(1, 1, 1, keys)
    offset = (variants.offsets[unit:unit + n].view(n, 1, 1, 1) if variants.offsets is not None
              else dims.sk - dims.sq)
    relative = j - i - offset  # key position relative to the query's diagonal i + off
    if variants.slopes is not None:
        s.sub_(variants.slopes[unit:unit + n].view(n, -1, 1, 1) * relative.abs().to(s.dtype))
    invisible = torch.zeros((1, 1, rows, keys), dtype=torch.bool, device=device)
    if causal:
        invisible = invisible | ((j > i) if top_left else (relative > 0))
    if variants.window is not None:
        left, right = variants.window
        if left >= 0:
            invisible = invisible | (relative < -left)
        if right >= 0:
            invisible = invisible | (relative > right)
    if variants.len_q is not None:
        invisible = (invisible | (j >= variants.len_k[unit:unit + n].view(n, 1, 1, 1))
                     | (i >= variants.len_q[unit:unit + n].view(n, 1, 1, 1)))
    s.masked_fill_(invisible, float("-inf"))
    return derivative
