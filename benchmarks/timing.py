"""Timing with CUDA events and peak memory per call (GPU only).

`median_ms(call)`: one untimed warm-up call (compilation, cuDNN plans, allocator
growth), one timed call to estimate the cost, untimed calls for `warmup_ms` more (the
GPU idles while a peer compiles, and its clock needs load to come back up: with one
warm-up call and 5-20 samples of 60 ms, one kernel measured 493 and 514 TFLOP/s in the
same H100 run), then `reps` back-to-back timed calls -- as many as fit in `target_ms`,
at least `min_reps`, at most `max_reps` -- each between its own pair of CUDA events on
the current stream. The result is their median. (triton.testing.do_bench works the same way; this loop also returns the
samples and bounds the repetitions, which keeps the whole grid within minutes.)

`peak_bytes(call)`: torch.cuda.max_memory_allocated() after one call minus
memory_allocated() before it (peak statistics reset first): the extra memory the
call needs at its peak, outputs and workspaces included, inputs excluded.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RepetitionPolicy:
    """How many timed calls a measurement gets (see the module docstring)."""

    target_ms: float = 200.0
    min_reps: int = 10
    max_reps: int = 50
    warmup_ms: float = 100.0

    def reps(self, estimate_ms: float) -> int:
        wanted = int(self.target_ms / max(estimate_ms, 1e-3))
        return max(self.min_reps, min(self.max_reps, wanted))


def _timed_calls(call, reps: int) -> list[float]:
    """Milliseconds of `reps` back-to-back calls, each between its own pair of events.
    No synchronisation between calls: the host queues ahead, so launch overhead
    hides behind the previous call as it does in a training loop."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def median_ms(call, policy: RepetitionPolicy) -> tuple[float, list[float]]:
    """(median milliseconds per call, every timed sample)."""
    call()
    torch.cuda.synchronize()
    (estimate,) = _timed_calls(call, 1)
    for _ in range(int(policy.warmup_ms / max(estimate, 1e-3))):
        call()
    samples = _timed_calls(call, policy.reps(estimate))
    return statistics.median(samples), samples


def peak_bytes(call) -> int:
    """Extra device memory one call needs at its peak (see the module docstring)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak
