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

import torch

from . import replay
from .launch import launches_on_device, padded_head_dim
from .targets import current_target
from .tuning import launch_config
from .validation import DTYPE_NAMES


def _tensor_key(tensor) -> tuple | type:
    if not isinstance(tensor, torch.Tensor):
        return type(tensor)
    return tensor.shape, tensor.stride(), tensor.dtype, tensor.device, tensor.data_ptr() % 16 == 0


def step_key(tensors: tuple, options: tuple) -> tuple | None:
    """The key of a call with `tensors` (q first) and non-tensor `options`, or None where no
    step may stand in for the whole path (the module docstring says when)."""
    if not (launches_on_device() and replay.enabled()):
        return None
    if any(isinstance(option, torch.Tensor) for option in options):
        return None
    given = [id(tensor) for tensor in tensors if tensor is not None]
    if len(set(given)) != len(given):
        return None
    try:
        q = tensors[0]
        target = current_target()
        block_d, dtype = padded_head_dim(q.shape[-1], q.dtype), DTYPE_NAMES[q.dtype]
        key = (tuple(map(_tensor_key, tensors)), q.requires_grad and torch.is_grad_enabled(),
               tuple(map(type, options)), options, target, replay.current_device(),
               launch_config("decode_split", block_d, dtype, target), launch_config("decode_merge", block_d, dtype, target))
        hash(key)
    except Exception:  # noqa: BLE001 -- a bad argument: the whole path's checks name it
        return None
    return key
