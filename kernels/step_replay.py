"""A whole call's launches, launched again: what a decode step costs the host when its
signature was seen before.

kernels.replay takes Triton's JIT dispatch out of each launch, but a decode step still paid,
on the H100 machines, ~90-160 us of host time for ~11 us of GPU time at small caches
(reports/h100-sm90/kv-cache/host-time/profile_host-*.log): the argument checks, the launch
plan, each launch's replay key (every argument, again) and the Python between them -- more
than FlagAttention's paged_attention (53-56 us) for the same call.

So an operator may record a call: `record` takes the launches kernels.replay saw while the
call ran (replay.recording) and notes, for each tensor slot of each launch, where its tensor
came from -- one of the call's own tensors, its `roles` (inputs, tensors made from them, its
outputs), found by identity, or a scratch tensor the call allocated that no role is (a fresh
contiguous tensor of the same shape and dtype each time).  A later call that the operator
knows to be the same in everything but its tensors' addresses (its key: shapes, strides,
dtypes, devices, 16-byte alignments, options, target, launch configurations) makes its roles
and `launch`es the recorded launchers with them.  What makes that safe is the operator's key,
not this module: every non-tensor argument a launch took must follow from it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import replay as replays
from .allocation import new_output
from .replay import Recorded, Replay

# Where a slot's tensor comes from: the call's roles[index], or its scratch[index].
ROLE, SCRATCH = 0, 1


class Step(NamedTuple):
    """launches: (replay, grid, ((slot, ROLE or SCRATCH, index), ...)) in launch order;
    scratch: (shape, dtype) of each scratch tensor; data: what the operator keeps besides."""

    launches: tuple[tuple[Replay, tuple, tuple[tuple[int, int, int], ...]], ...]
    scratch: tuple[tuple[tuple[int, ...], torch.dtype], ...]
    data: object


def record(launches: list[Recorded], roles: tuple, data=None) -> Step | None:
    """The Step of a call whose launches were `launches` and whose own tensors are `roles`;
    None where a launch has no replay (the JIT's every time) or a tensor is neither a role
    nor a fresh contiguous allocation."""
    scratch, scratch_index, entries = [], {}, []
    for launched in launches:
        if launched.replay is None:
            return None
        sources = []
        for (slot, _), tensor in zip(launched.replay.tensor_slots, launched.tensors):
            role = next((i for i, known in enumerate(roles) if known is tensor), None)
            if role is not None:
                sources.append((slot, ROLE, role))
                continue
            if id(tensor) not in scratch_index:
                if not tensor.is_contiguous() or tensor.storage_offset() != 0:
                    return None
                scratch_index[id(tensor)] = len(scratch)
                scratch.append((tuple(tensor.shape), tensor.dtype))
            sources.append((slot, SCRATCH, scratch_index[id(tensor)]))
        entries.append((launched.replay, launched.grid, tuple(sources)))
    return Step(tuple(entries), tuple(scratch), data)


def launch(step: Step, roles: tuple, device: torch.device) -> None:
    """The step's launches, in order, with `roles` and fresh scratch (kernels.allocation's
    new_output: NaN-filled while outputs are poisoned) in their slots."""
    scratch = [new_output(shape, dtype, device) for shape, dtype in step.scratch]
    stream = replays.current_stream()
    for replay, grid, sources in step.launches:
        values = replay.values.copy()
        for slot, kind, index in sources:
            values[slot] = roles[index] if kind == ROLE else scratch[index]
        replay.run(grid, stream, values)
    replays.counts["replayed"] += len(step.launches)
