"""kv_cache_attention's check of its values (check_values=True), without stalling the GPU.

The lengths and the block table live on the device, so checking their values means reading an
answer back to the host, and a read back waits for everything queued before it.  Read at the
start of the call, it left the GPU idle while the host then queued the call's kernels: on the
H100 the checked call read the 512 MiB caches at 32-56 % of the copy bandwidth where the
unchecked one read them at 45-90 % (reports/h100-sm90/kv-cache/benchmark-ddf1e78/).

So the answer is read at the end.  `start` launches cache_values_kernel (per sequence: are its
values inside the cache?) and queues the copy of its answer to pinned host memory behind it,
then the call queues its append and attention kernels, which read the answer first: a flagged
sequence is read as empty, and the append writes nothing at all where any sequence is flagged.
`finish` waits for the copy only (not for the attention behind it) and raises the error
kernels.validation.check_cache_values names.  The caches are untouched and nothing is read out
of bounds, as before; the error comes after the kernels were queued rather than before.

Under CUDA graph capture nothing can be read back: check_values=True is refused there.
"""

from __future__ import annotations

import threading

import torch

from .decode_cache import cache_values_kernel, table_arguments
from .launch import launch, launches_on_device
from .validation import check_cache_values

# Block-table entries a program of cache_values_kernel checks at a time.
VALUE_CHECK_BLOCK = 1024

# Per thread and device: the pinned buffer the answer is copied to (as long as the largest batch
# seen) and the event recorded behind the copy.  A call finishes with them before it returns.
_per_thread = threading.local()


class PendingCheck:
    """A check started by `start`: `flags` (batch,) int32 on the device, which the kernels read;
    where the answer will be on the host, and what check_cache_values takes to name an error."""

    __slots__ = ("flags", "answer", "copied", "arguments")

    def __init__(self, flags, answer, copied, arguments):
        self.flags, self.answer, self.copied, self.arguments = flags, answer, copied, arguments


def start(cache_seqlens: torch.Tensor, appended: int, capacity: int, table: torch.Tensor | None,
          num_pages: int, page_size: int) -> PendingCheck:
    """Launch the check of the call's values (kernels.validation.check_cache_values' checks).
    table: the call's block table, None for a contiguous cache (which has no entries to check).
    Where launches do not reach a device (compile-only), the values are checked here, in full,
    and the kernels get flags of 0 to compile against."""
    batch, device = cache_seqlens.shape[0], cache_seqlens.device
    arguments = (cache_seqlens, appended, capacity, table, num_pages, page_size)
    if batch == 0 or not launches_on_device():
        check_cache_values(*arguments)
        return PendingCheck(torch.zeros(batch, dtype=torch.int32, device=device), None, None, arguments)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise ValueError("check_values: the values of cache_seqlens and block_table cannot be read back while a "
                         "CUDA graph is captured; pass check_values=False (and check them outside the graph)")
    flags = torch.empty(batch, dtype=torch.int32, device=device)
    read_table, *table_strides = table_arguments(table, cache_seqlens)
    launch(cache_values_kernel, batch, 1, cache_seqlens, read_table, flags, *table_strides,
           appended, capacity, num_pages, page_size, PAGED=table is not None, BLOCK=VALUE_CHECK_BLOCK)
    if device.type != "cuda":  # the interpreter: the answer is there already
        return PendingCheck(flags, flags, None, arguments)
    answer, copied = _host_buffer(device, batch)
    answer.copy_(flags, non_blocking=True)
    copied.record()
    return PendingCheck(flags, answer, copied, arguments)


def finish(check: PendingCheck) -> None:
    """Wait for the answer of `start` (not for the kernels queued after it) and raise the
    error check_cache_values names where a value leaves the cache."""
    if check.answer is None:
        return
    if check.copied is not None:
        check.copied.synchronize()
    if any(check.answer.tolist()):  # a list's any: a tenth of a torch reduction's host time
        check_cache_values(*check.arguments)
        raise RuntimeError("kv_cache_attention: cache_values_kernel found a value outside the cache that "
                           "check_cache_values did not (a harness bug, not the caller's)")


def _host_buffer(device: torch.device, batch: int) -> tuple[torch.Tensor, torch.Event]:
    """This thread's pinned (batch,) int32 buffer and event for `device`: a view of one buffer
    per device, as long as the largest batch seen; a larger batch replaces that device's
    buffer and its views (kept by batch), no other device's."""
    kept = getattr(_per_thread, "buffers", None)
    if kept is None:
        kept = _per_thread.buffers = {}
    buffer, event, views = kept.get(device.index, (None, None, {}))
    view = views.get(batch)
    if view is None:
        if buffer is None or buffer.numel() < batch:
            buffer = torch.empty(max(batch, 64), dtype=torch.int32, pin_memory=True)
            # torch.Event, not torch.cuda.Event: its record() finds the current stream in C++,
            # where torch.cuda.Event's asks torch.cuda.current_stream() (~13 us on the H100 machines).
            event = event or torch.Event(device)
            views = {}
            kept[device.index] = (buffer, event, views)
        view = views[batch] = buffer[:batch]
    return view, event
