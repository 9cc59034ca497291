"""Replaying an implementation's dropout mask in the reference paths.

The reference never draws random numbers: it applies exactly the keep mask the
implementation used, chunk by chunk, so a dropout case measures arithmetic, not
luck. An implementation exposes its mask in one of two protocols:

* keep mask by seed (the bundled kernels): the harness passes `dropout_p` and
  `dropout_seed`, and the operator function carries an attribute
  `dropout_keep_mask(seed, p, batch, heads, seq_q, seq_k, *, device, batch_heads,
  rows, keys)` that materialises any chunk of the mask;
* seed and offset (FlagAttention, whose kernels own their RNG): the harness passes
  `dropout_p` and `return_seed_offset=True`, the call returns the Philox `(seed,
  offset)` it used (conformance.judging.returns), and a separate function given with
  `--dropout-mask MODULE:FUNCTION` recomputes the whole keep mask:
  `mask_function(batch, heads, seq_q, seq_k, p, seed, offset, device)` -> bool
  (batch, heads, seq_q, seq_k), True = kept. The harness seeds torch's RNG with the
  case's dropout seed before each call, so relaunches draw the same mask.

The replay also counts kept weights, so the keep rate is checked statistically:
|observed - (1 - p)| must stay within max(0.01, 6 sigma) -- the 0.01 is
FlashAttention's own test tolerance, the 6 sigma keeps tiny cases from flaking.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from conformance.cases.inputs import dropout_seed

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
        from conformance.bundled.reference import Dropout

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


def dropout_replay(case, function, seed_offset=None, mask_function=None) -> DropoutReplay | None:
    """The replay of `function`'s mask for `case` (None without dropout). With a
    `mask_function` (seed/offset protocol), `seed_offset` is what the call returned."""
    if not case.dropout:
        return None
    if mask_function is not None:
        return DropoutReplay(case.dropout, _recomputed_mask(case, mask_function, seed_offset))
    materialise = getattr(function, "dropout_keep_mask", None)
    if materialise is None:
        raise TypeError("dropout case: the implementation has no `dropout_keep_mask` attribute and no "
                        "--dropout-mask function was given, so the reference cannot replay its mask")
    mask = functools.partial(materialise, dropout_seed(case), case.dropout, case.batch, case.heads,
                             case.seq_q, case.seq_k, device=case_device())
    return DropoutReplay(case.dropout, mask)


def _recomputed_mask(case, mask_function, seed_offset):
    """Chunks of the whole mask `mask_function` recomputes from the call's (seed, offset)."""
    if seed_offset is None or len(seed_offset) != 2 or any(item is None for item in seed_offset):
        raise TypeError(f"dropout case: expected the call to return (seed, offset) with "
                        f"return_seed_offset=True, got {seed_offset!r}")
    shape = (case.batch, case.heads, case.seq_q, case.seq_k)
    mask = mask_function(*shape, case.dropout, *seed_offset, case_device())
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != shape:
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"--dropout-mask function: expected a bool tensor of shape {shape}, got {got}")
    flat = mask.reshape(-1, case.seq_q, case.seq_k)

    def chunk(batch_heads, rows, keys):
        return flat[batch_heads[0]:batch_heads[1], rows[0]:rows[1], keys[0]:keys[1]]

    return chunk


def seed_rng_for_call(case) -> None:
    """Seed torch's RNG (every device) before a seed/offset-protocol call, so the kernel
    draws the same (seed, offset) on every launch of the case."""
    torch.manual_seed(dropout_seed(case))


def case_device() -> str:
    from conformance.backends import active_profile

    return active_profile().device
