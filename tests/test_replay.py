"""kernels.replay: a launch of a signature seen before goes to the compiled kernel's launcher
with the call's tensors in their places; anything the key does not cover goes through the JIT.

There is no GPU here, so the JIT is a stand-in with Triton's calling convention (a
`kernel[grid](...)` that launches and returns the compiled kernel, whose `run` takes the grid,
stream, function, metadata, hooks and the launcher's arguments).  The real thing is judged on
the GPU by every tier, which launches through this path."""

import gc
import inspect
import weakref
from types import SimpleNamespace

import pytest
import torch

from conformance.bundled.kernels import replay


def fake_kernel(x_ptr, out_ptr, n, scale, first_batch_head, BLOCK, FLAG=False):
    """The stand-in's parameters: two tensors, two scalars, one int keyword and two constexprs
    (the upper-case ones, as the bundled kernels name theirs)."""


class FakeCompiled:
    function, packed_metadata = "function-handle", "packed"

    def __init__(self):
        self.launcher_calls = []

    def run(self, *arguments):
        self.launcher_calls.append(arguments)

    def launch_metadata(self, grid, stream, *values):
        return ("metadata", grid)


class FakeJIT:
    """Triton's JITFunction as replay sees it: params, signature, kernel[grid](...)."""

    def __init__(self):
        self.signature = inspect.signature(fake_kernel)
        self.params = [SimpleNamespace(name=name, is_constexpr=name.isupper()) for name in self.signature.parameters]
        self.jit_launches = []
        self.compiled = FakeCompiled()

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.jit_launches.append(grid)  # not the tensors: the test of what a replay keeps alive
            return self.compiled
        return run


@pytest.fixture
def kernel(monkeypatch):
    monkeypatch.setattr(replay, "replayable", lambda k: isinstance(k, FakeJIT))
    monkeypatch.setattr(replay, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: 0, get_current_stream=lambda device: 1234)))
    monkeypatch.setattr(replay, "launch_hooks", lambda: (None, None))
    monkeypatch.setattr(replay, "_REPLAYS", {})
    monkeypatch.setattr(replay, "_enabled", True)
    return FakeJIT()


def call(kernel, x, out, n=64, scale=0.5, grid=(4, 2), **constexprs):
    replay.launch(kernel, grid, (x, out, n, scale), {"first_batch_head": 0, "BLOCK": 16, **constexprs})


def test_a_signature_seen_before_goes_to_the_launcher_with_the_new_tensors(kernel):
    first = (torch.zeros(64), torch.zeros(64))
    call(kernel, *first)
    second = (torch.ones(64), torch.ones(64))
    call(kernel, *second)
    assert len(kernel.jit_launches) == 1
    (launched,) = kernel.compiled.launcher_calls
    grid_and_handles, arguments = launched[:9], launched[9:]
    assert grid_and_handles == (4, 2, 1, 1234, "function-handle", "packed", ("metadata", (4, 2)), None, None)
    assert arguments[0] is second[0] and arguments[1] is second[1]
    # Triton >= 3.3 passes every parameter, the constexprs and defaults included
    assert arguments[2:] == (64, 0.5, 0, 16, False)


def test_triton_3_2_convention_passes_only_the_non_constexpr_arguments(kernel, monkeypatch):
    monkeypatch.setattr(replay, "CONSTEXPRS_REACH_LAUNCHER", False)
    call(kernel, torch.zeros(8), torch.zeros(8))
    x, out = torch.ones(8), torch.ones(8)
    call(kernel, x, out)
    (launched,) = kernel.compiled.launcher_calls
    assert launched[9:11] == (x, out) and launched[11:] == (64, 0.5, 0)


@pytest.mark.parametrize("change", ["int", "float", "grid", "constexpr", "dtype", "misaligned", "int for float",
                                    "bool for int"])
def test_anything_the_jit_specialises_on_goes_through_the_jit_again(kernel, change):
    x = torch.zeros(64)
    call(kernel, x, x)
    changed = {
        "int": lambda: call(kernel, x, x, n=65),
        "float": lambda: call(kernel, x, x, scale=0.25),
        "grid": lambda: call(kernel, x, x, grid=(5, 2)),
        "constexpr": lambda: call(kernel, x, x, FLAG=True),
        "dtype": lambda: call(kernel, x.half(), x),
        "misaligned": lambda: call(kernel, x[1:], x),  # 4 bytes past a 16-byte boundary
        "int for float": lambda: call(kernel, x, x, scale=0.5 + 0.5) or call(kernel, x, x, scale=1),
        "bool for int": lambda: call(kernel, x, x, n=1) or call(kernel, x, x, n=True),
    }[change]
    changed()
    pairs = change in ("int for float", "bool for int")  # two new signatures, equal as plain values
    assert len(kernel.jit_launches) == (3 if pairs else 2) and not kernel.compiled.launcher_calls


def test_the_same_tensor_twice_then_two_tensors_fills_each_place(kernel):
    shared = torch.zeros(16)
    call(kernel, shared, shared)
    x, out = torch.ones(16), torch.full((16,), 2.0)
    call(kernel, x, out)
    (launched,) = kernel.compiled.launcher_calls
    assert launched[9] is x and launched[10] is out


def test_a_tensor_where_none_was_is_a_new_signature(kernel):
    x = torch.zeros(16)
    call(kernel, x, None)
    call(kernel, x, x)
    call(kernel, x, x)
    assert len(kernel.jit_launches) == 2
    (launched,) = kernel.compiled.launcher_calls
    assert launched[9] is x and launched[10] is x


def test_a_replay_answers_for_its_own_kernel_only(kernel):
    x = torch.zeros(16)
    call(kernel, x, x)
    other = FakeJIT()
    call(other, x, x)
    assert len(kernel.jit_launches) == 1 and len(other.jit_launches) == 1
    # a kernel whose id a dead one's replay still holds (ids are reused) launches through the JIT
    (key,) = [key for key, kept in replay._REPLAYS.items() if kept.kernel is kernel]
    replay._REPLAYS[key].kernel = other
    call(kernel, x, x)
    assert len(kernel.jit_launches) == 2 and replay._REPLAYS[key].kernel is kernel


def test_a_replay_keeps_no_tensor_of_its_first_launch_alive(kernel):
    cache = torch.zeros(1 << 16)
    alive = weakref.ref(cache)
    call(kernel, cache, torch.zeros(8))
    del cache
    gc.collect()
    assert alive() is None


def test_an_argument_that_is_no_key_goes_through_the_jit(kernel):
    x = torch.zeros(8)
    call(kernel, x, x, scale=[0.5])
    call(kernel, x, x, scale=[0.5])
    assert len(kernel.jit_launches) == 2 and not kernel.compiled.launcher_calls


def test_the_switch_sends_launches_through_the_jit(kernel):
    x = torch.zeros(8)
    previous = replay.set_enabled(False)
    try:
        call(kernel, x, x)
        call(kernel, x, x)
    finally:
        replay.set_enabled(previous)
    assert len(kernel.jit_launches) == 2 and not kernel.compiled.launcher_calls and not replay._REPLAYS


def test_a_replay_passes_the_hooks_and_launch_metadata_as_the_jit_does(kernel, monkeypatch):
    x = torch.zeros(8)
    monkeypatch.setattr(replay, "launch_hooks", lambda: ("enter", "exit"))
    call(kernel, x, x)
    call(kernel, x, x)
    (launched,) = kernel.compiled.launcher_calls
    assert launched[6:9] == (("metadata", (4, 2)), "enter", "exit")


def test_interpreted_kernels_are_not_replayed():
    from conformance.bundled.kernels.decode_forward import decode_merge_kernel
    from conformance.bundled.kernels.targets import interpreting
    assert interpreting() and not replay.replayable(decode_merge_kernel)


@pytest.mark.parametrize("version, release", [("3.2.0", (3, 2)), ("3.6.0+git1a2b3c", (3, 6)), ("3.10.0", (3, 10))])
def test_release_reads_major_and_minor(version, release):
    assert replay._release(version) == release
