"""One GPU per pytest-xdist worker.

Under `pytest -n N` on a machine with several GPUs, worker `gwK` runs its cases
on GPU K mod (number of visible GPUs), so N = number of GPUs gives one worker
per GPU. The pin must be set before the worker touches CUDA (backend detection
reads the current device's capability), so the plugin calls `pin_xdist_worker`
first thing in pytest_configure. The index is relative to CUDA_VISIBLE_DEVICES,
as every CUDA index is. Every results line of a GPU run records the device its
case ran on (`device_index`), so the spread can be checked afterwards.
"""

from __future__ import annotations

import re

_WORKER_ID = re.compile(r"gw(\d+)")


def xdist_worker_number(worker_id: str | None) -> int | None:
    """K of an xdist worker id `gwK`; None outside xdist (the controller, a plain run)."""
    match = _WORKER_ID.fullmatch(worker_id or "")
    return int(match[1]) if match else None


def device_for_worker(worker_id: str | None, device_count: int) -> int | None:
    """The GPU index worker `worker_id` runs on; None when it is no xdist worker or there is no GPU."""
    number = xdist_worker_number(worker_id)
    if number is None or device_count < 1:
        return None
    return number % device_count


def wants_cuda(backend_option: str | None, interpreter_requested: bool) -> bool:
    """Whether this run may use a CUDA device (not when the interpreter is asked for)."""
    if backend_option:
        return backend_option.startswith("cuda")
    return not interpreter_requested


def pin_xdist_worker(worker_id: str | None, backend_option: str | None, interpreter_requested: bool,
                     cuda=None) -> int | None:
    """Make this xdist worker's GPU the current CUDA device; returns its index (None: not pinned).

    cuda: the torch.cuda module (a stand-in in tests).
    """
    if xdist_worker_number(worker_id) is None or not wants_cuda(backend_option, interpreter_requested):
        return None
    if cuda is None:
        import torch

        cuda = torch.cuda
    if not cuda.is_available():
        return None
    index = device_for_worker(worker_id, cuda.device_count())
    if index is not None:
        cuda.set_device(index)
    return index


def record_device(line: dict, device: str) -> dict:
    """Add `device_index` (the CUDA device the case ran on) to a results line of a GPU run."""
    if device == "cuda":
        import torch

        if torch.cuda.is_available():  # a GPU profile may be chosen on a machine without one
            line["device_index"] = torch.cuda.current_device()
    return line
