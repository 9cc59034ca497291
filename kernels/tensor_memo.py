"""Values worked out from a tensor's contents on the host, kept while that tensor lives unchanged.

Reading a device tensor's values waits for the GPU, so what the host derives from them (a
packed batch's checked offsets, kernels.validation; its tile lists, kernels.packed_tiles) is
kept per tensor and used again while torch's version counter says the tensor was not changed
in place (anything torch writes to it moves the counter; a write torch does not see, a custom
kernel's, is not noticed).  Entries are keyed by the tensor's id and checked to be that very
tensor through a weak reference (a dead tensor's id can be reused); the oldest go first.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch


class TensorMemo:
    """At most `kept` values, each for a (tensor, key) pair: `get` answers only while the
    tensor is the one `put` saw, at the version it had then."""

    def __init__(self, kept: int):
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()
        self._kept = kept

    def get(self, tensor: torch.Tensor, key=None):
        """The value put for (tensor, key), or None where there is none or the tensor changed."""
        entry = self._entries.get((id(tensor), key))
        if entry is None:
            return None
        reference, version, value = entry
        if reference() is not tensor or version != tensor._version:
            return None
        return value

    def put(self, tensor: torch.Tensor, value, key=None) -> None:
        """Keep `value` for (tensor, key) at the tensor's current version."""
        entry_key = (id(tensor), key)
        self._entries[entry_key] = (weakref.ref(tensor), tensor._version, value)
        self._entries.move_to_end(entry_key)
        while len(self._entries) > self._kept:
            self._entries.popitem(last=False)
