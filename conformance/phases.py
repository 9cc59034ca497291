"""Where a case's time goes: seconds per phase of the flow, on every results line.

    line["phases"] = {"inputs": 0.002, "launch": 0.011, "compile_cold": 1.93, ...}

A `PhaseClock` times the steps of one case (conformance.running.runner): the seeded
inputs, the implementation's launch(es), the determinism relaunch, the fp32
reference, the same-precision torch paths, the floors' noise estimates, the
judging and the diagnosis. Triton's compilation happens inside a launch, so the
compile timer (`install_compile_timer`) moves its seconds out of `launch` into
`compile_cold` (a specialization built anew) or `compile_cached` (loaded from
Triton's cache directory). Whatever the case spent outside those is `other`;
the isolated runner adds `isolation` (a worker's start and the request's round
trip) in the parent. The kernels that compiled anew are named in the line's
`compiled` (a warm run that still compiles shows which specializations its cache lacked).

On a GPU every phase ends with a device synchronization: work is queued
asynchronously, and without it the reference's kernels would be billed to the
step that next waits for the device. The synchronizations cost microseconds.

The run's totals are rendered by conformance.reporting.time_breakdown.
"""

from __future__ import annotations

import contextlib
import time

# The phases of one case, in the order of the flow (the report keeps this order).
CASE_PHASES = ("inputs", "launch", "compile_cold", "compile_cached", "determinism", "reference",
               "torch_paths", "noise", "judging", "diagnosis", "other")


class PhaseClock:
    """Accumulates seconds per phase for one case; `phase()` blocks nest (the inner
    block's seconds count for the inner phase only)."""

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.seconds: dict[str, float] = {}
        self.cold_compiles: list[str] = []  # the kernels compiled anew (not found in Triton's cache)
        self._open: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        started = time.perf_counter()
        self._open.append(name)
        try:
            yield
        finally:
            _synchronize(self.device)
            self._open.pop()
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        """Count `seconds` for `name`, and take them out of the phase it ran inside."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if self._open:
            outer = self._open[-1]
            self.seconds[outer] = self.seconds.get(outer, 0.0) - seconds

    def compiled(self, kernel: str, cached: bool, seconds: float) -> None:
        """One call of Triton's compile(): its seconds, and the kernel's name if it compiled anew."""
        self.add("compile_cached" if cached else "compile_cold", seconds)
        if not cached:
            self.cold_compiles.append(kernel)

    def record(self, total_s: float) -> dict:
        """The case's phases, rounded, with `other` = what the phases do not cover of `total_s`."""
        measured = {name: seconds for name, seconds in self.seconds.items() if seconds > 0}
        measured["other"] = max(0.0, total_s - sum(measured.values()))
        return {name: round(seconds, 4) for name, seconds in measured.items()}


class _NoClock(PhaseClock):
    """Times nothing (callers outside a run: tests, probes)."""

    @contextlib.contextmanager
    def phase(self, name: str):
        yield

    def add(self, name: str, seconds: float) -> None:
        pass

    def compiled(self, kernel: str, cached: bool, seconds: float) -> None:
        pass


NO_CLOCK = _NoClock()
_current: PhaseClock = NO_CLOCK


@contextlib.contextmanager
def measuring(clock: PhaseClock):
    """Make `clock` the one the compile timer reports to while the block runs."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous


def _synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:  # a faulted context: the case's own line says what happened
            pass


# --- GPU memory ------------------------------------------------------------------------

def reset_peak_memory(device: str) -> None:
    """Start counting the case's peak GPU memory (torch's caching allocator)."""
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            try:
                torch.cuda.reset_peak_memory_stats()
            except Exception:  # a faulted context
                pass


def peak_memory_fields(device: str) -> dict:
    """`gpu_peak_bytes`: the most GPU memory torch held for the case at once (kernel, reference,
    torch paths), what the worker plan's memory per worker (conformance.running.parallelism)
    must cover; nothing on the CPU or after a fault."""
    if device != "cuda":
        return {}
    import torch

    try:
        return {"gpu_peak_bytes": int(torch.cuda.max_memory_allocated())} if torch.cuda.is_available() else {}
    except Exception:
        return {}


# --- Triton's compilation -------------------------------------------------------------

_installed = False
_last_cache_hit: list[bool] = []  # set by the compilation listener during one compile() call


def install_compile_timer() -> bool:
    """Wrap triton's `compile` so that each call's seconds go to the current clock, as
    `compile_cached` when its compilation listener (triton >= 3.4) reports a cache hit,
    else `compile_cold`. Returns whether the wrapper is in place; idempotent.

    The JIT binds `triton.compiler.compile` when a kernel is first launched, so this must
    run before the kernels' first launch in the process (the runner calls it per case:
    after the first, it only returns)."""
    global _installed
    if _installed:
        return True
    try:
        import triton.compiler as package
        from triton.compiler import compiler as module
    except Exception:
        return False
    original = getattr(module, "compile", None)
    if original is None:
        return False

    def timed_compile(src, *args, **kwargs):
        started = time.perf_counter()
        _last_cache_hit.clear()
        try:
            return original(src, *args, **kwargs)
        finally:
            cached = bool(_last_cache_hit and _last_cache_hit[-1])
            _current.compiled(getattr(src, "name", None) or "?", cached, time.perf_counter() - started)

    module.compile = timed_compile
    if getattr(package, "compile", None) is original:
        package.compile = timed_compile
    _listen_for_cache_hits()
    _installed = True
    return True


def _listen_for_cache_hits() -> None:
    """Chain a compilation listener that notes whether the call was served from the cache."""
    try:
        from triton import knobs
    except Exception:  # triton < 3.4: every compile() call counts as cold
        return
    compilation = getattr(knobs, "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        return
    previous = compilation.listener

    def listener(*, cache_hit: bool, **kwargs):
        _last_cache_hit.append(bool(cache_hit))
        if previous is not None:
            previous(cache_hit=cache_hit, **kwargs)

    compilation.listener = listener
