"""The isolated case worker: `python -m conformance.running.worker CONFIG_JSON REPLY_FD`.

Started and fed by `conformance.running.isolation`. It activates the backend (before
anything imports the kernels), pins its GPU, then runs one case per request line
on stdin and answers each on the REPLY_FD pipe, one JSON message per line:

    {"ready": pid}                                      once, when set up
    {"line": {results line}, "healthy": bool}           per case
    {"harness_error": {"reason": ..., "traceback": ...}}  run_case itself raised

`healthy` is false when the device no longer works after the case (a CUDA fault
such as an illegal memory access poisons the context of the whole process); the
parent then replaces this worker. Its own stdout and stderr go to a log file the
parent reads after a crash, with faulthandler's traceback of the fatal signal.

CONFIG_JSON: backend (profile key), backend_option, kernels (op=module:function
specs), capabilities (file or null), dropout_masks (specs), device_index (or null),
threads (torch CPU threads, or null), check_determinism, distribution (spec or null).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys

from conformance import backends
from conformance.cases.catalog import Case
from conformance.cases.distributions import parse_optional
from conformance.judging import verdicts
from conformance.running.devices import record_device
from conformance.running.implementations import Implementations
from conformance.running.results import from_json, to_json


def send(channel, message: dict) -> None:
    channel.write(to_json(message) + "\n")
    channel.flush()


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies, so a hung worker never outlives its run."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def device_healthy(device: str) -> bool:
    """Whether the device still runs work (a sticky CUDA error fails every later call)."""
    if device != "cuda":
        return True
    import torch

    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").add_(1).item() == 2.0
    except Exception:
        return False


def _serve(config: dict, channel) -> None:
    profile = backends.activate(config["backend"])  # before anything imports the kernels
    import torch

    if config.get("device_index") is not None:
        torch.cuda.set_device(config["device_index"])
    if config.get("threads"):  # its share of the host's cores (conformance.running.parallelism)
        torch.set_num_threads(config["threads"])
    from conformance.judging.verdicts import error_fields
    from conformance.running.runner import run_case

    implementations = Implementations.from_selection(config)
    options = dict(backend_option=config.get("backend_option"),
                   check_determinism=bool(config.get("check_determinism")),
                   distribution=parse_optional(config.get("distribution")))
    send(channel, {"ready": os.getpid()})
    for request in sys.stdin:
        try:
            line = run_case(Case.from_id(from_json(request)["case"]), profile, implementations, **options)
        except Exception as exc:  # a harness bug, or a device fault surfacing after the kernel
            send(channel, {"harness_error": error_fields(exc, prefix="harness: "),
                           "healthy": device_healthy(profile.device)})
            continue
        healthy = line["verdict"] != verdicts.ERROR or device_healthy(profile.device)
        send(channel, {"line": record_device(line, profile.device) if healthy else line, "healthy": healthy})


def main(argv: list[str]) -> None:
    faulthandler.enable()  # a fatal signal's Python traceback goes to the log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where a hung case is stuck, before the kill
    _die_with_parent()
    config, reply_fd = json.loads(argv[0]), int(argv[1])
    with os.fdopen(reply_fd, "w", encoding="utf-8") as channel:
        _serve(config, channel)


if __name__ == "__main__":
    main(sys.argv[1:])
