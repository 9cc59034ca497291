"""FlashAttention-2's variants as the peers express them: which keys a query row sees (causal,
window, sequence bounds) and the ALiBi bias, elementwise on index tensors, so the same rule
serves FlexAttention's `mask_mod` / `score_mod` (conformance.peers.flex) and SDPA's
materialised additive mask (conformance.peers.sdpa).

The rule is the operators' (conformance.cases.variants): with `diagonal` = i + Sk - Sq (per
sequence for a packed batch), query i sees key j iff

    diagonal - left <= j <= diagonal + right    (window (left, right); -1 = unbounded side)
    j <= diagonal                               (causal, bottom-right: right = min(right, 0))

and ALiBi adds -slope * |diagonal - j| to the (soft-capped, scaled) score.
"""

from __future__ import annotations

import torch


def window_bounds(causal: bool, window) -> tuple[int, int]:
    """(left, right) of the visible band around the diagonal, -1 for an unbounded side: the
    window's, with the causal mask as right = min(right, 0)."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    return int(left), int(right)


def in_band(diagonal, key, left: int, right: int):
    """Whether `key` lies in [diagonal - left, diagonal + right] (elementwise; -1: unbounded
    side), or None when neither side is bounded (every key)."""
    keep = None
    if right >= 0:
        keep = key <= diagonal + right
    if left >= 0:
        lower = key >= diagonal - left
        keep = lower if keep is None else keep & lower
    return keep


def alibi_bias(slope, diagonal, key):
    """ALiBi's -slope * |diagonal - key| (elementwise; slope a float tensor)."""
    return -slope * (diagonal - key).abs()


def check_options(window, softcap, alibi_slopes, heads: int, batch: int) -> None:
    """ValueError naming the argument when a variant option is malformed (the bundled
    kernels' checks, so a peer refuses what they refuse instead of misreading it)."""
    if window is not None and (len(tuple(window)) != 2 or any(int(x) < -1 for x in window)):
        raise ValueError(f"window_size: expected (left, right) with ints >= -1, got {window!r}")
    if softcap is not None and softcap < 0:
        raise ValueError(f"softcap: expected a number >= 0 (0: none), got {softcap!r}")
    if alibi_slopes is not None and tuple(alibi_slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes: expected shape ({heads},) or ({batch}, {heads}), "
                         f"got {tuple(alibi_slopes.shape)}")


def slopes_by_batch(alibi_slopes, batch: int, heads: int, device) -> torch.Tensor | None:
    """The slopes as fp32 (batch, heads): (H,) slopes are every batch entry's."""
    if alibi_slopes is None:
        return None
    return alibi_slopes.to(device=device, dtype=torch.float32).expand(batch, heads).contiguous()
