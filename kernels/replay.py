"""Launching a compiled Triton kernel again without the JIT's dispatch.

A decode step costs the H100 ~11 us and the host 126-186 us, and Triton's JIT dispatch is a
large part of the host's share: binding ~50 arguments, specialising each and looking the
compiled kernel up cost 18-30 us per launch on the H100 machines, against 6-10 us for the
compiled kernel's own launcher (reports/h100-sm90/kv-cache/host-time/launch_cost-*.log).

The first launch of a signature goes through the JIT, which compiles or finds the kernel.
The compiled kernel is then kept under a key finer than the JIT's own specialisation: the
kernel, the grid, the device, every non-tensor argument by value and every tensor by dtype
and whether its address is 16-byte aligned (what Triton specialises a pointer on).  A later
launch with the same key calls the compiled kernel's launcher directly, with the call's
tensors in the places the first launch's held.  Inside `recording()` each launch is also
noted with its replay and tensors, which is how a whole call's launches are kept and launched
again without even these keys (kernels.step_replay).

What the launcher takes differs by Triton release (read in each release's runtime/jit.py):
3.2 passes the non-constexpr arguments, 3.3 to 3.9 every argument in parameter order, and
the launch hooks moved from CompiledKernel's class attributes to triton.knobs in 3.4 (chains,
never None, from 3.5); a replay passes the hooks and launch metadata as the JIT would.  What a
replay does not follow: Triton's compilation knobs changed while the process runs (debug,
instrumentation), which the JIT would compile a new kernel for; set them before the first
launch, or FA_JIT_LAUNCH=1.  Any
other release, the interpreter, autotuned kernels, a kernel with pre-run hooks, and
FA_JIT_LAUNCH=1 in the environment go through the JIT every time.
"""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager
from typing import NamedTuple

import torch
import triton
from triton.runtime import driver
from triton.runtime.jit import JITFunction


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


RELEASE = _release(triton.__version__)
# The releases whose launch path was read; the others take the JIT path.
KNOWN_RELEASES = ((3, 2), (3, 9))
CONSTEXPRS_REACH_LAUNCHER = RELEASE >= (3, 3)

try:  # triton >= 3.4
    from triton import knobs as _knobs

    def launch_hooks():
        return _knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook
except ImportError:  # triton 3.2, 3.3
    from triton.compiler.compiler import CompiledKernel as _CompiledKernel

    def launch_hooks():
        return _CompiledKernel.launch_enter_hook, _CompiledKernel.launch_exit_hook


class Replay:
    """One compiled kernel and its launcher's arguments, the tensors' places left to fill."""

    __slots__ = ("kernel", "compiled", "values", "tensor_slots")

    def __init__(self, kernel, compiled, values: list, tensor_slots: tuple[tuple[int, int], ...]):
        self.kernel = kernel  # the key holds id(kernel): a replay answers for this kernel only
        self.compiled = compiled
        self.values = values  # what the launcher takes, as the first launch passed it
        self.tensor_slots = tensor_slots  # (position among values, position among the call's arguments)

    def launch(self, grid: tuple, stream, flat: tuple) -> None:
        values = self.values.copy()
        for slot, index in self.tensor_slots:
            values[slot] = flat[index]
        self.run(grid, stream, values)

    def run(self, grid: tuple, stream, values: list) -> None:
        """The launcher with `values`: self.values with this launch's tensors in their slots."""
        compiled = self.compiled
        enter, leave = launch_hooks()
        # As the JIT does: the metadata (None in 3.2-3.4 unless an enter hook is set; 3.5 on
        # always make it, their hooks being chains) and the hooks go to the launcher.
        metadata = compiled.launch_metadata(grid, stream, *values)
        compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1, stream,
                     compiled.function, compiled.packed_metadata, metadata, enter, leave, *values)


class Recorded(NamedTuple):
    """One launch as `recording` saw it: its replay (None where it went through the JIT and
    gave none), its grid, and the tensors in its replay's slots, in Replay.tensor_slots' order."""

    replay: Replay | None
    grid: tuple
    tensors: tuple


_recording = threading.local()


@contextmanager
def recording():
    """Yields a list that fills with a Recorded per launch made inside, on this thread: what a
    caller keeps to launch the same kernels again with new tensors (kernels.step_replay)."""
    previous = getattr(_recording, "launches", None)
    _recording.launches = launches = []
    try:
        yield launches
    finally:
        _recording.launches = previous


# Replays by key (launch's); emptied when full, like the other host caches of a decode step.
_REPLAYS: dict[tuple, Replay | None] = {}
_REPLAYS_KEPT = 1024
_TENSOR_PLACES: dict[tuple, tuple[int, ...]] = {}
_enabled = KNOWN_RELEASES[0] <= RELEASE <= KNOWN_RELEASES[1] and os.environ.get("FA_JIT_LAUNCH", "0") in ("", "0")
counts = {"replayed": 0, "through_jit": 0}


def enabled() -> bool:
    """Whether launches go through replays (set_enabled)."""
    return _enabled


def current_device() -> int:
    """The device launches go to now (the active driver's), which a replay's key names."""
    return driver.active.get_current_device()


def current_stream():
    """The stream launches go to now on the current device (the active driver's)."""
    return driver.active.get_current_stream(driver.active.get_current_device())


def set_enabled(enabled: bool) -> bool:
    """Turn replays on or off (off: every launch through the JIT); returns the previous state."""
    global _enabled
    previous, _enabled = _enabled, bool(enabled)
    return previous


def replayable(kernel) -> bool:
    """A kernel the JIT compiles for a device (not the interpreter's, not an autotuner) and
    runs nothing of ours before a launch."""
    # JITFunction is generic: isinstance goes through the ABC machinery, so a type's answer is kept.
    kind = type(kernel)
    jit = _JIT_TYPES.get(kind)
    if jit is None:
        jit = _JIT_TYPES[kind] = issubclass(kind, JITFunction)
    return jit and not getattr(kernel, "pre_run_hooks", None)


_JIT_TYPES: dict[type, bool] = {}


def _tensor_places(types: tuple) -> tuple[int, ...]:
    """The positions of the tensors among arguments of `types`: kept per types tuple, so that a
    launch's key costs a loop over its few tensors, not an isinstance over its ~50 arguments."""
    places = _TENSOR_PLACES.get(types)
    if places is None:
        if len(_TENSOR_PLACES) >= _REPLAYS_KEPT:
            _TENSOR_PLACES.clear()
        places = _TENSOR_PLACES[types] = tuple(i for i, kind in enumerate(types) if issubclass(kind, torch.Tensor))
    return places


def launch(kernel, grid: tuple, args: tuple, kwargs: dict) -> None:
    """kernel[grid](*args, **kwargs), through a replay where one is kept for the signature
    (noted, with its tensors, inside `recording()`)."""
    replay = _launch(kernel, grid, args, kwargs)
    launches = getattr(_recording, "launches", None)
    if launches is not None:
        flat = args + tuple(kwargs.values()) if kwargs else args
        tensors = () if replay is None else tuple(flat[index] for _, index in replay.tensor_slots)
        launches.append(Recorded(replay, grid, tensors))


def _launch(kernel, grid: tuple, args: tuple, kwargs: dict) -> Replay | None:
    """launch's launch; the replay it used or made (None: through the JIT, with none kept)."""
    if not _enabled or not replayable(kernel):
        _through_jit(kernel, grid, args, kwargs)
        return None
    flat = args + tuple(kwargs.values()) if kwargs else args
    device = driver.active.get_current_device()
    # Each argument's type too: True == 1 == 1.0 as keys, not as the JIT's specialisations.
    types = tuple(map(type, flat))
    values = list(flat)
    for place in _tensor_places(types):
        tensor = flat[place]
        values[place] = (tensor.dtype, tensor.data_ptr() % 16 == 0)
    # id(kernel), not the kernel: a JITFunction hashes in Python (Replay.kernel confirms it).
    key = (id(kernel), grid, device, tuple(kwargs), types, tuple(values))
    try:
        replay = _REPLAYS.get(key)
    except TypeError:  # an argument that is no key (a list, ...): the JIT decides
        _through_jit(kernel, grid, args, kwargs)
        return None
    if replay is not None and replay.kernel is kernel:
        counts["replayed"] += 1
        replay.launch(grid, driver.active.get_current_stream(device), flat)
        return replay
    compiled = _through_jit(kernel, grid, args, kwargs)
    if replay is None and key in _REPLAYS:  # a signature that gives no replay
        return None
    if len(_REPLAYS) >= _REPLAYS_KEPT:
        _REPLAYS.clear()
    replay = _REPLAYS[key] = _replay_of(kernel, compiled, args, kwargs)
    return replay


def _through_jit(kernel, grid: tuple, args: tuple, kwargs: dict):
    counts["through_jit"] += 1
    return kernel[grid](*args, **kwargs)


def _replay_of(kernel, compiled, args: tuple, kwargs: dict) -> Replay | None:
    """The Replay of a launch the JIT just made (None where the JIT returned no compiled
    kernel with a launcher), holding no tensor of the call: a cached KV cache must not be
    kept alive by its first launch."""
    if compiled is None or not hasattr(compiled, "packed_metadata"):
        return None
    names = [param.name for param in kernel.params]
    bound = kernel.signature.bind(*args, **{name: value for name, value in kwargs.items() if name in names})
    bound.apply_defaults()
    flat_index = {**{name: i for i, name in enumerate(names[:len(args)])},
                  **{name: len(args) + i for i, name in enumerate(kwargs)}}
    values, tensor_slots = [], []
    for param in kernel.params:
        if param.is_constexpr and not CONSTEXPRS_REACH_LAUNCHER:
            continue
        value = bound.arguments[param.name]
        if isinstance(value, torch.Tensor):
            tensor_slots.append((len(values), flat_index[param.name]))
            value = None
        values.append(value)
    return Replay(kernel, compiled, values, tuple(tensor_slots))
