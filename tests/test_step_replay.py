"""kernels.step_replay and kernels.decode_steps: a call's launches recorded from kernels.replay
and launched again with a later call's tensors, and the key that decides when a later call may.

No GPU here: kernels.replay's stand-in JIT (tests/test_replay.py) records what its launcher is
given.  On the GPU, scripts/replay_check.py compares decode calls launched from their steps with
the JIT's, bit for bit, and checks that a bad length is refused after a step."""

import pytest
import torch

from conformance.bundled.kernels import decode_steps, replay, step_replay, tuning
from conformance.bundled.kernels.launch_tables import LaunchConfig
import test_replay
from test_replay import call

kernel = test_replay.kernel  # its stand-in JIT fixture, for these tests too


def recorded_call(kernel, x, out, **kwargs):
    with replay.recording() as launches:
        call(kernel, x, out, **kwargs)
    return launches


def test_a_step_launches_with_the_roles_of_the_later_call(kernel):
    x, out = torch.zeros(16), torch.zeros(16)
    call(kernel, x, out)  # the replay exists from here on
    step = step_replay.record(recorded_call(kernel, x, out), roles=(x, out))
    later = (torch.ones(16), torch.full((16,), 2.0))
    step_replay.launch(step, later, torch.device("cpu"))
    launched = kernel.compiled.launcher_calls[-1]
    assert launched[9] is later[0] and launched[10] is later[1] and launched[11:13] == (64, 0.5)
    assert len(kernel.jit_launches) == 1


def test_a_tensor_no_role_is_becomes_fresh_scratch_of_its_shape_and_dtype(kernel):
    x, scratch = torch.zeros(16), torch.zeros(4, 8, dtype=torch.float64)
    call(kernel, x, scratch)
    step = step_replay.record(recorded_call(kernel, x, scratch), roles=(x,))
    assert step.scratch == (((4, 8), torch.float64),)
    step_replay.launch(step, (x,), torch.device("cpu"))
    made = kernel.compiled.launcher_calls[-1][10]
    assert made is not scratch and made.shape == (4, 8) and made.dtype == torch.float64


@pytest.mark.parametrize("why", ["through the JIT", "a view as scratch"])
def test_no_step_where_a_launch_cannot_be_launched_again(kernel, why, monkeypatch):
    x = torch.zeros(32)
    if why == "through the JIT":
        monkeypatch.setattr(replay, "_enabled", False)
        launches = recorded_call(kernel, x, x)
        roles = (x,)
    else:
        call(kernel, x, x[16:])
        launches = recorded_call(kernel, x, x[16:])
        roles = (x,)
    assert launches and step_replay.record(launches, roles) is None


def tensors(**changes):
    q = torch.zeros(2, 1, 8, 64, dtype=torch.float16)
    cache = torch.zeros(2, 128, 2, 64, dtype=torch.float16)
    lengths = torch.zeros(2, dtype=torch.int32)
    return (changes.get("q", q), cache, changes.get("v", cache.clone()), lengths, None, None, None, None)


OPTIONS = (True, (-1, -1), 0.0, None, 0, False, None, None, True)


@pytest.fixture(autouse=True)
def a_device(monkeypatch):
    """The driver and device a launch would go to: none answers here (the key names them)."""
    monkeypatch.setattr(decode_steps, "launch_place", lambda: ("driver", 0))


def test_equal_signatures_give_equal_keys_and_each_difference_another():
    key = decode_steps.step_key(tensors(), OPTIONS)
    assert key is not None and decode_steps.step_key(tensors(), OPTIONS) == key
    q = torch.zeros(2, 1, 8, 64, dtype=torch.float16)
    others = [
        decode_steps.step_key(tensors(q=torch.zeros(2, 1, 8, 65, dtype=torch.float16)[..., 1:]), OPTIONS),  # stride
        decode_steps.step_key(tensors(q=torch.zeros(2 * 8 * 64 + 1, dtype=torch.float16)[1:].view(q.shape)),
                              OPTIONS),  # 2 bytes past 16-byte alignment
        decode_steps.step_key(tensors(q=q.bfloat16()), OPTIONS),
        decode_steps.step_key(tensors(), (1, *OPTIONS[1:])),  # causal=1: the checks refuse it, True passes
        decode_steps.step_key(tensors(), (*OPTIONS[:3], 0.125, *OPTIONS[4:])),
    ]
    assert all(other is not None and other != key for other in others)


def test_another_device_or_an_override_gives_another_key(monkeypatch):
    """The target, the device and the launch configurations are named by what they follow
    from: the driver's place and the decode roles' overrides."""
    key = decode_steps.step_key(tensors(), OPTIONS)
    monkeypatch.setattr(decode_steps, "launch_place", lambda: ("driver", 1))
    on_device_1 = decode_steps.step_key(tensors(), OPTIONS)
    monkeypatch.setitem(tuning.OVERRIDES, "decode_merge", LaunchConfig(16, 64, num_warps=4, num_stages=1))
    overridden = decode_steps.step_key(tensors(), OPTIONS)
    assert len({key, on_device_1, overridden}) == 3


@pytest.mark.parametrize("why", ["a tensor option", "one tensor twice", "unhashable", "replays off", "no tensor"])
def test_no_key_where_the_whole_path_must_run(why, monkeypatch):
    given, options = tensors(), OPTIONS
    if why == "a tensor option":
        options = (*OPTIONS[:6], torch.tensor(1.0), None, True)
    elif why == "one tensor twice":
        given = (*given[:2], given[1], *given[3:])
    elif why == "unhashable":
        options = (True, [-1, -1], *OPTIONS[2:])
    elif why == "replays off":
        monkeypatch.setattr(replay, "_enabled", False)
    elif why == "no tensor":
        given = ("q", *given[1:])
    assert decode_steps.step_key(given, options) is None
