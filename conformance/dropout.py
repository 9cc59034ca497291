"""Replaying an implementation's dropout mask in the reference paths.

The reference never draws random numbers: it applies exactly the keep mask the
implementation used, chunk by chunk, so a dropout case measures arithmetic, not
luck. An implementation exposes its mask through an attribute of the operator
function, `dropout_keep_mask(seed, p, batch, heads, seq_q, seq_k, *, device,
batch_heads, rows, keys)` (the bundled `kernels.flash_attention` has it). The
replay also counts kept weights, so the keep rate is checked statistically:
|observed - (1 - p)| must stay within max(0.01, 6 sigma) -- the 0.01 is
FlashAttention's own test tolerance, the 6 sigma keeps tiny cases from flaking.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from conformance.inputs import dropout_seed

RATE_TOLERANCE = 0.01


@dataclass
class DropoutReplay:
    p: float
    materialise: object  # keep_mask(batch_heads=..., rows=..., keys=...) -> bool tensor
    kept: int = 0
    seen: int = 0
    counting: bool = True

    def keep_mask(self, batch_heads, rows, keys):
        mask = self.materialise(batch_heads=batch_heads, rows=rows, keys=keys)
        if self.counting:
            self.kept += int(mask.sum())
            self.seen += mask.numel()
        return mask

    def as_reference(self):
        from reference import Dropout

        return Dropout(self.p, self.keep_mask)

    def keep_rate(self) -> float | None:
        return self.kept / self.seen if self.seen else None

    def rate_problem(self) -> str | None:
        """Why the observed keep rate is implausible for p, or None."""
        if not self.seen:
            return None
        # The reference asks for each element once per pass and a backward case makes
        # two passes, so seen/2 is a safe lower bound on the number of distinct draws.
        sigma = math.sqrt(self.p * (1 - self.p) / max(1, self.seen // 2))
        tolerance = max(RATE_TOLERANCE, 6 * sigma)
        observed, expected = self.keep_rate(), 1 - self.p
        if abs(observed - expected) <= tolerance:
            return None
        return (f"dropout keep rate {observed:.4f}, expected {expected:.4f} +- {tolerance:.4f} "
                f"over {self.seen} mask elements")


def dropout_replay(case, function) -> DropoutReplay | None:
    """The replay of `function`'s mask for `case` (None without dropout)."""
    if not case.dropout:
        return None
    materialise = getattr(function, "dropout_keep_mask", None)
    if materialise is None:
        raise TypeError("dropout case: the implementation has no `dropout_keep_mask` attribute, "
                        "so the reference cannot replay its mask")
    mask = functools.partial(materialise, dropout_seed(case), case.dropout, case.batch, case.heads,
                             case.seq_q, case.seq_k, device=case_device())
    return DropoutReplay(case.dropout, mask)


def case_device() -> str:
    from conformance.backends import active_profile

    return active_profile().device
