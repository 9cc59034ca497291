"""Crash and hang isolation: run cases in a worker process, one case at a time.

A kernel that faults the device (an illegal memory access poisons the CUDA
context of the whole process), segfaults, aborts or never returns must cost its
own case, not the run. `IsolatedRunner` keeps one long-lived worker process
(`conformance.running.worker`) per pytest process -- so one per GPU under pytest-xdist --
and hands it one case at a time:

* the case's results line comes back as the worker wrote it;
* the worker dies (signal or exit)   -> `error`, "worker crashed (signal SIGSEGV)";
* no answer within the time limit    -> the worker's process group is killed,
  `error`, "timeout after N s (worker killed)";
* the device no longer works after a case -> that case keeps its own line and the
  worker is replaced before the next one.

Crash and timeout lines carry the tail of the worker's log (faulthandler's
Python traceback of the fatal signal, CUDA's message) as their `traceback`.
A fresh worker starts for the next case; starting one (importing torch, triton
and the kernels) is bounded by the same time limit.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from typing import Callable

from conformance.cases.catalog import Case
from conformance.running.results import from_json, to_json
from conformance.running.spawn import module_command

# Per-case time limits when the user gives none: a GPU case takes seconds; the
# interpreter's largest cases (long head dims, backward) take minutes on 2 cores.
DEFAULT_TIMEOUT_S = {"cuda": 300.0, "cpu": 600.0}
_LOG_TAIL_BYTES = 4000
_STOP_GRACE_S = 5.0
_DUMP_WAIT_S = 1.0


def default_timeout_s(device: str) -> float:
    """The per-case limit for a profile's device (the CPU's for a device not listed)."""
    return DEFAULT_TIMEOUT_S.get(device, DEFAULT_TIMEOUT_S["cpu"])


class WorkerLost(Exception):
    """The worker crashed or timed out; `str()` is the results line's reason."""

    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.log_tail = log_tail


def exit_description(returncode: int | None) -> str:
    """`signal SIGSEGV` for a negative return code, `exit code N` otherwise."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class _Worker:
    """One `python -m conformance.running.worker` process and its reply pipe."""

    def __init__(self, config: dict, timeout_s: float, wait: bool = True):
        """Start the worker; with `wait`, until it says it is ready (else the first request waits)."""
        self.log = tempfile.TemporaryFile()
        read_fd, write_fd = os.pipe()
        try:
            self.process = subprocess.Popen(  # this harness, whatever the working directory holds
                module_command("conformance.running.worker", json.dumps(config), str(write_fd)),
                stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, pass_fds=(write_fd,),
                start_new_session=True)  # own process group: killed as a whole
        finally:
            os.close(write_fd)  # the worker holds the only write end: its death reads as EOF
        self._reply_fd = read_fd
        self._buffer = b""
        self._started = False
        if wait:
            self.await_start(timeout_s)

    def await_start(self, timeout_s: float) -> None:
        """Wait for the worker's `ready` message (once); WorkerLost if it dies or takes too long."""
        if self._started:
            return
        try:
            self.receive(timeout_s, what="to start")
        except WorkerLost as lost:
            self.stop()
            raise WorkerLost(f"worker failed to start: {lost}", lost.log_tail) from None
        self._started = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def request(self, case: Case, timeout_s: float) -> dict:
        self.await_start(timeout_s)
        try:
            self.process.stdin.write((to_json({"case": case.id}) + "\n").encode())
            self.process.stdin.flush()
        except OSError:  # died between cases
            raise self._lost(self._crash_reason()) from None
        return self.receive(timeout_s)

    def receive(self, timeout_s: float, what: str = "") -> dict:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.dump_stacks()
                self.kill()
                raise self._lost(f"timeout after {timeout_s:g} s{' ' + what if what else ''} (worker killed)")
            readable, _, _ = select.select([self._reply_fd], [], [], remaining)
            if readable:
                chunk = os.read(self._reply_fd, 1 << 16)
                if not chunk:
                    raise self._lost(self._crash_reason())
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\n")
        return from_json(message.decode("utf-8"))

    def _crash_reason(self) -> str:
        try:
            returncode = self.process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # closed its pipe yet lives on: treat it as crashed
            self.kill()
            returncode = self.process.returncode
        return f"worker crashed ({exit_description(returncode)})"

    def _lost(self, reason: str) -> WorkerLost:
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - _LOG_TAIL_BYTES))
        return WorkerLost(reason, self.log.read().decode("utf-8", "replace").strip())

    def dump_stacks(self) -> None:
        """Have the worker write its Python stacks to the log (faulthandler on SIGUSR1)."""
        if self.alive():
            os.kill(self.process.pid, signal.SIGUSR1)
            try:
                self.process.wait(timeout=_DUMP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass

    def kill(self) -> None:
        if self.alive():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def stop(self) -> None:
        """End the worker: EOF on its stdin, then SIGKILL if it does not leave (once: a worker
        that failed to start is stopped there, and again when its runner discards it)."""
        if self._reply_fd is None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=_STOP_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()
        os.close(self._reply_fd)
        self._reply_fd = None
        self.log.close()


def with_isolation_time(line: dict, round_trip_s: float) -> dict:
    """The worker's line with `phases.isolation`: what the round trip cost beyond the case
    itself (starting a worker when one was needed, the pipes, reading the reply)."""
    phases = line.setdefault("phases", {})
    phases["isolation"] = round(max(0.0, round_trip_s - (line.get("duration_s") or 0.0)), 4)
    return line


class IsolatedRunner:
    """Runs cases in a worker process; `run` always returns a results line.

    config: the worker's configuration (see conformance.running.worker).
    timeout_s: per-case time limit (also bounds a worker's start).
    error_line: (case, reason, traceback) -> a results line with verdict `error`.
    """

    def __init__(self, config: dict, timeout_s: float, error_line: Callable[[Case, str, str], dict]):
        self.config = config
        self.timeout_s = timeout_s
        self.error_line = error_line
        self._worker: _Worker | None = None
        self.restarts = 0

    def run(self, case: Case) -> dict:
        started = time.perf_counter()
        try:
            reply = self._ready_worker().request(case, self.timeout_s)
        except WorkerLost as lost:
            self._discard()
            line = self.error_line(case, str(lost), lost.log_tail)
            line["duration_s"] = round(time.perf_counter() - started, 4)
            return line
        if not reply["healthy"]:  # e.g. an illegal memory access poisoned the CUDA context
            self._discard()
        if "harness_error" in reply:
            return self.error_line(case, reply["harness_error"]["reason"], reply["harness_error"]["traceback"])
        return with_isolation_time(reply["line"], time.perf_counter() - started)

    def start(self) -> None:
        """Start a worker without waiting for it (its imports and device setup then overlap with
        the rest of the session's start); the first case waits for it to be ready."""
        if self._worker is None:
            self._worker = _Worker(self.config, self.timeout_s, wait=False)

    def _ready_worker(self) -> _Worker:
        if self._worker is not None and not self._worker.alive():
            self._discard()
        if self._worker is None:
            self._worker = _Worker(self.config, self.timeout_s)
        return self._worker

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
            self.restarts += 1

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
