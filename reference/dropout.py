"""Attention dropout as the reference paths replay it: p and the exact keep mask.

The reference never draws random numbers: the kernel under test decides which
weights it dropped, and the reference applies that same mask, chunk by chunk,
so the comparison measures arithmetic, not luck. The mask comes from a callable
that materialises any chunk on demand (e.g. ``kernels.dropout_keep_mask``), so the
whole B*H x Sq x Sk mask is never held at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

import torch

Span = Tuple[int, int]


@dataclass(frozen=True)
class Dropout:
    """Dropout of the attention weights with a known keep mask.

    Attributes:
        p: drop probability in [0, 1); kept weights are scaled by 1 / (1 - p).
        keep_mask: ``keep_mask(batch_heads=(start, stop), rows=(start, stop),
            keys=(start, stop))`` -> bool tensor (stop - start of each range, in that
            order), True where weight P[b, h, i, j] is kept; ``batch_heads`` ranges over
            the flattened index b * H + h. Any device; it is moved to the reference's.
            E.g. ``functools.partial(kernels.dropout_keep_mask, seed, p, B, H, Sq, Sk,
            device=...)``.
    """

    p: float
    keep_mask: Callable[..., torch.Tensor]

    @property
    def keep_scale(self) -> float:
        return 1.0 / (1.0 - self.p)

    def chunk(self, batch_heads: Span, rows: Span, keys: Span, device: torch.device) -> torch.Tensor:
        """The keep mask of one chunk as a bool tensor on ``device``, shape-checked."""
        mask = self.keep_mask(batch_heads=batch_heads, rows=rows, keys=keys)
        want = (batch_heads[1] - batch_heads[0], rows[1] - rows[0], keys[1] - keys[0])
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != want:
            got = (f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor)
                   else type(mask).__name__)
            raise ValueError(f"dropout.keep_mask: expected a bool tensor of shape {want}, got {got}")
        return mask.to(device)

    @classmethod
    def from_dense(cls, p: float, mask: torch.Tensor) -> "Dropout":
        """Replay a whole mask held in memory, (B, H, Sq, Sk) or (B*H, Sq, Sk) (small tests)."""
        flat = mask.reshape(-1, *mask.shape[-2:])

        def keep_mask(batch_heads: Span, rows: Span, keys: Span) -> torch.Tensor:
            return flat[batch_heads[0]:batch_heads[1], rows[0]:rows[1], keys[0]:keys[1]]

        return cls(p, keep_mask)
