"""When kv_cache_attention may launch a call's recorded step again (kernels.step_replay), and
under which key.

A step is recorded from a call that ran the whole path: every check passed, the plan was
made, and each launch took non-tensor arguments that follow from the call's shapes, strides,
dtypes, options, target and launch configurations, and a replay chosen by its tensors' dtypes
and 16-byte alignments.  So the key is all of that: a later call with an equal key would run
the same checks to the same answers and launch the same kernels with the same arguments,
but for its tensors' addresses.  Each option's type is part of the key as well (True == 1 ==
1.0, but causal=1 is refused by the checks).  No key (None) -- the whole path, every time --
where launches do not go to the device through replays, where an option is a tensor (a descale,
read on the host, may change its value), where two arguments are one tensor (a later call's
distinct tensors would land in one slot), or where anything is unhashable or unreadable
(the checks will say what).
"""

from __future__ import annotations

from itertools import repeat

import torch

from . import replay
from .launch import launches_on_device
from .targets import launch_place
from .tuning import OVERRIDES

# The launch-table roles a decode call launches: their configurations follow from the target,
# q's dtype and head dim (the key has them) and an override of the role, if one is set.
_ROLES = ("decode_split", "decode_merge")


def _tensor_key(tensor) -> tuple | type:
    if not isinstance(tensor, torch.Tensor):
        return type(tensor)
    return tensor.shape, tensor.stride(), tensor.dtype, tensor.device, tensor.data_ptr() % 16 == 0


def step_key(tensors: tuple, options: tuple) -> tuple | None:
    """The key of a call with `tensors` (q first) and non-tensor `options`, or None where no
    step may stand in for the whole path (the module docstring says when).

    The target and the device are named by kernels.targets.launch_place (triton's active
    driver and its current device); the launch configurations by their overrides
    (kernels.tuning.launch_config: the tables are the target's).  Both are cheaper to read
    than the target and the configurations themselves, and a decode step's host time is
    what this key is for."""
    if not (launches_on_device() and replay.enabled()):
        return None
    if any(map(isinstance, options, repeat(torch.Tensor))):
        return None
    given = [id(tensor) for tensor in tensors if tensor is not None]
    if len(set(given)) != len(given):
        return None
    try:
        key = (tuple(map(_tensor_key, tensors)), tensors[0].requires_grad and torch.is_grad_enabled(),
               tuple(map(type, options)), options, launch_place(),
               *map(OVERRIDES.get, _ROLES))
        hash(key)
    except Exception:  # noqa: BLE001 -- a bad argument: the whole path's checks name it
        return None
    return key
