"""Timing with CUDA events and peak memory per call (GPU only).

`interleaved_medians(calls)`: the implementations of one problem timed under the same
conditions.  Each runs once untimed (compilation, cuDNN plans, allocator growth) and
once timed to estimate its cost; then, in `rounds` rounds, every implementation in turn
runs untimed calls for its share of `warmup_ms` and then its share of `reps` back-to-back
timed calls -- as many as fit in `target_ms`, at least `min_reps`, at most `max_reps` --
each between its own pair of CUDA events on the current stream.  The result per
implementation is the median of its samples.  Why rounds: an H100's clock follows its
power and temperature, which a long run of one kernel drives and a peer's compilation
(seconds of idle GPU) relaxes; timed one after another, with one warm-up call and 5-20
samples in 60 ms, one kernel read 493 and 514 TFLOP/s in the same run; FlexAttention,
always timed straight after its compilation, read 5-10 % faster than when it took turns
(reports/h100-sm90/tuning/unmasked-fma/).  (triton.testing.do_bench times one call the
same way; this loop also returns the samples and bounds the repetitions, which keeps the
whole grid within minutes.)

`graph_replay(calls)`: the calls captured once each, in order, in one CUDA graph, and a
callable replaying it -- how a serving loop runs a decode step, with no Python or launch
overhead between kernels.  Time a replay and divide by len(calls).

`kernel_times(call)`: which kernels one call runs on the device and how long each takes
(torch.profiler's CUDA activity, kernels inside a replayed graph included): where a call's
time goes, e.g. a decode step's split kernel against its merge.

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
    rounds: int = 4

    def reps(self, estimate_ms: float) -> int:
        wanted = int(self.target_ms / max(estimate_ms, 1e-3))
        return max(self.min_reps, min(self.max_reps, wanted))


def _timed_calls(call, reps: int) -> list[float]:
    """Milliseconds of `reps` back-to-back calls, each between its own pair of events.
    No synchronisation between calls: the host queues ahead, so launch overhead
    hides behind the previous call as it does in a training loop.

    The events are torch.Event, whose record() finds the current stream in C++:
    torch.cuda.Event's asks torch.cuda.current_stream() in Python, ~13-25 us a record on
    the H100 machines, which a call too short to hide its host time (a small decode step)
    was charged twice (reports/h100-sm90/kv-cache/host-time/)."""
    device = torch.device("cuda", torch.cuda.current_device())
    events = [(torch.Event(device, enable_timing=True), torch.Event(device, enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def interleaved_medians(calls: dict, policy: RepetitionPolicy) -> dict:
    """name -> (median milliseconds per call, every timed sample), or the exception the
    implementation raised while being timed (the others go on).  See the module docstring."""
    results, reps = {}, {}
    for name, call in calls.items():
        try:
            call()
            torch.cuda.synchronize()
            (estimate,) = _timed_calls(call, 1)
            reps[name] = (estimate, policy.reps(estimate))
            results[name] = []
        except Exception as exc:  # noqa: BLE001 -- recorded for this implementation only
            results[name] = exc
    for round_index in range(policy.rounds):
        for name, (estimate, total) in reps.items():
            if isinstance(results[name], BaseException):
                continue
            share = total // policy.rounds + (round_index < total % policy.rounds)
            try:
                for _ in range(int(policy.warmup_ms / policy.rounds / max(estimate, 1e-3))):
                    calls[name]()
                results[name] += _timed_calls(calls[name], share) if share else []
            except Exception as exc:  # noqa: BLE001
                results[name] = exc
    return {name: samples if isinstance(samples, BaseException) else (statistics.median(samples), samples)
            for name, samples in results.items()}


def graph_replay(calls: list, warmups: int = 2):
    """A callable replaying `calls` (each once, in order) from one CUDA graph.

    Each call first runs `warmups` times on a side stream, as capture wants it: compilation,
    autotuning, allocator growth and any host-side memo happen there, not in the graph.  The
    tensors a call returns during capture live in the graph's private memory pool, which the
    graph keeps until it is freed (drop the callable)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            for _ in range(warmups):
                call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph.replay


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


def kernel_summary(kernels: list[tuple[str, float]], calls: int) -> dict[str, tuple[float, float]]:
    """Kernel name -> (launches per call, median microseconds a launch) of the (name,
    microseconds) of every kernel that `calls` calls ran."""
    durations: dict[str, list[float]] = {}
    for name, microseconds in kernels:
        durations.setdefault(name, []).append(microseconds)
    return {name: (len(times) / calls, statistics.median(times)) for name, times in durations.items()}


def kernel_times(call, calls: int = 5, name_length: int = 60) -> dict[str, tuple[float, float]]:
    """kernel_summary of `calls` calls of `call` (run once before, untimed), each kernel named
    by the first `name_length` characters of its name (templated CUDA names run long)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = [(event.name[:name_length], event.time_range.end - event.time_range.start)
               for event in profiled.events() if event.device_type == DeviceType.CUDA]
    return kernel_summary(kernels, calls)
