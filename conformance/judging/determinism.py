"""Bitwise determinism of a forward pass: launch it twice, compare the bits.

A FlashAttention forward has no atomics and no split reductions: each output
element is computed by one program in a fixed order. Two launches on the same
inputs on the same device must therefore give the same bits. A difference can
only come from a race (a missing barrier, shared memory reused too early) or from
reading memory the kernel never wrote -- bugs even when both results happen to be
within the rule's bound, because the next launch may not be. So the runner turns
a difference into a `fail` (see `verdict_after_check`).

Only the forward is checked: a backward may accumulate with atomics (dQ in many
FlashAttention backwards) and legitimately differ in the last bits between launches.
"""

from __future__ import annotations

import torch

from conformance.judging import verdicts

# Integer dtypes by element size in bytes, for viewing a float tensor's bits.
INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns, as a (contiguous) signed integer tensor of the same width."""
    return tensor.contiguous().view(INT_OF_SIZE[tensor.element_size()])


def bitwise_equal(first: torch.Tensor, second: torch.Tensor) -> bool:
    """Same shape, dtype and bits in every element (NaN payloads and -0.0 included)."""
    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    return bool(torch.equal(bits(first), bits(second)))


def differing_tensors(first: dict, second: dict) -> list[str]:
    """Names of the tensors whose bits differ between two launches (in `first`'s order)."""
    return [name for name, tensor in first.items()
            if not (isinstance(second.get(name), torch.Tensor) and bitwise_equal(tensor, second[name]))]


def snapshot(tensors: dict) -> dict:
    """Copies of a launch's tensors, so a second launch cannot overwrite them in place."""
    return {name: t.detach().clone() if isinstance(t, torch.Tensor) else t for name, t in tensors.items()}


def verdict_after_check(verdict: str, reason: str, differing: list[str]) -> tuple[str, str]:
    """A passing forward whose launches differ fails; other verdicts keep theirs, with the finding added."""
    if not differing:
        return verdict, reason
    finding = f"forward not bitwise deterministic: {', '.join(differing)} differ between two launches"
    if verdict == verdicts.PASS:
        return verdicts.FAIL, finding
    return verdict, f"{reason}; {finding}" if reason else finding
