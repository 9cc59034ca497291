"""Hunts in processes of their own: one per mutant, `jobs` at a time.

A hunt runs its cases in its own process (spawned: the backend is activated before any
kernel is imported, and a CUDA context is never forked), which is fast, and tells the
parent through a pipe of each case it starts and ends (kill.Progress).  A mutant's fault can
take that process down -- an out-of-bounds store segfaults the interpreter -- or never
return.  Such a hunt does not take the table with it: the parent starts another process that
goes on from the case that was running, now each case in an isolated worker
(conformance.running.isolation), where the crash or the hang is that case's `error` line --
a kill, as it is in a `conformance run` -- and the line's `isolated_after` says what ended
the first process.  A hunt whose isolated process is lost as well (the harness itself, not a
case) is an `error` line.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

from conformance import backends
from conformance.judging import verdicts
from conformance.running.isolation import exit_description
from conformance.bundled.mutants.definitions import BY_NAME
from conformance.bundled.mutants.kill import BROKEN, Progress, hunt

# How long a hunt's first process may run before it counts as hung (default): a whole
# standard tier on a GPU takes minutes, the interpreter's smoke tier about as long.
HUNT_TIMEOUT_S = 3600.0


def _hunt_and_report(channel, name, tier, backend, max_kills, shrink_s, progress: Progress) -> None:
    """A hunt's process: its Progress reported case by case, then its line."""
    progress.on_case = lambda rung, case_id, kill: channel.send(("case", rung, case_id, kill))
    channel.send(("line", hunt(name, tier, backend, max_kills, shrink_s, progress)))


@dataclass
class _Hunt:
    """One mutant's hunt in a process, and what the parent has heard of it."""

    name: str
    process: multiprocessing.Process
    channel: object
    progress: Progress
    started: float
    line: dict | None = None
    current: str | None = None  # the case it last started

    def receive(self) -> None:
        """Take in what the hunt has sent (its progress, its line)."""
        while self.line is None and self.channel.poll():
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                return
            if message[0] == "line":
                self.line = message[1]
            else:
                self._note(*message[1:])

    def _note(self, rung: str, case_id: str, kill: dict | None) -> None:
        if kill is None:  # starting it
            self.current = case_id
            return
        self.progress.done.add(case_id)
        self.progress.cases_run[rung] = self.progress.cases_run.get(rung, 0) + 1
        if kill:
            self.progress.kills.append(kill)

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.channel.close()


class _Scheduler:
    def __init__(self, tier, backend, max_kills, shrink_s, hunt_timeout_s, case_timeout_s):
        self.context = multiprocessing.get_context("spawn")
        self.arguments = (tier, backend, max_kills, shrink_s)
        self.hunt_timeout_s, self.case_timeout_s = hunt_timeout_s, case_timeout_s

    def start(self, name: str, progress: Progress) -> _Hunt:
        receiving, sending = self.context.Pipe(duplex=False)
        process = self.context.Process(target=_hunt_and_report, args=(sending, name, *self.arguments, progress),
                                       daemon=False)
        process.start()
        sending.close()
        return _Hunt(name, process, receiving, progress, time.monotonic())

    def settle(self, running: _Hunt) -> _Hunt | dict | None:
        """None while `running` goes on; its line once it sent one; else (its process lost or
        out of time) the isolated hunt that goes on from it, or for an isolated one an error line."""
        running.receive()
        if running.line is not None:
            running.stop()
            return running.line
        timed_out = (not running.progress.isolated and self.hunt_timeout_s is not None
                     and time.monotonic() - running.started > self.hunt_timeout_s)
        if running.process.is_alive() and not timed_out:
            return None
        running.receive()  # what it sent before it ended
        running.stop()
        lost = (f"the hunt ran past {self.hunt_timeout_s:g} s" if timed_out
                else f"the hunt's process ended without a result ({exit_description(running.process.exitcode)})")
        if running.progress.isolated:
            return _lost_line(running.name, f"{lost}, its cases isolated")
        progress = running.progress
        return self.start(running.name, Progress(progress.done, progress.kills, progress.cases_run,
                                                 isolated=True, lost=lost, first=running.current,
                                                 case_timeout_s=self.case_timeout_s))


def _lost_line(name: str, reason: str) -> dict:
    mutant = BY_NAME[name]
    return {"kind": "mutant", "case": f"mutant.{name}", "mutant": name, "fault": mutant.fault,
            "files": list(mutant.files), "status": BROKEN, "verdict": verdicts.ERROR,
            "reason": reason, "tier": None, "kills": [], "cases_run": {}}


def hunt_all(names: list[str], tier: str, backend: str | None = None, max_kills: int = 1,
             jobs: int = 1, on_result=None, shrink_s: float = 0,
             hunt_timeout_s: float | None = HUNT_TIMEOUT_S, case_timeout_s: float | None = None) -> list[dict]:
    """Hunt every mutant in `names`, `jobs` at a time, each in a process of its own (module
    doc); lines in `names` order.  `on_result(line)` is called as each hunt finishes.
    hunt_timeout_s: a first process's time (None: unbounded); case_timeout_s: an isolated
    case's (None: conformance.running.isolation's default)."""
    scheduler = _Scheduler(tier, backend, max_kills, shrink_s, hunt_timeout_s, case_timeout_s)
    waiting, running, lines = _longest_first(names, backend), [], {}
    try:
        while waiting or running:
            while waiting and len(running) < max(1, jobs):
                running.append(scheduler.start(waiting.pop(0), Progress()))
            wait([hunt.channel for hunt in running] + [hunt.process.sentinel for hunt in running], timeout=5.0)
            for hunt_ in list(running):
                outcome = scheduler.settle(hunt_)
                if outcome is None:
                    continue
                running.remove(hunt_)
                if isinstance(outcome, _Hunt):
                    running.append(outcome)
                    continue
                lines[hunt_.name] = outcome
                if on_result is not None:
                    on_result(outcome)
    finally:
        for hunt_ in running:
            hunt_.stop()
    return [lines[name] for name in names]


def _longest_first(names: list[str], backend: str | None) -> list[str]:
    """Submission order: hunts expected to run a whole tier (faults the interpreter
    cannot show) first, so they overlap with the many short ones."""
    interpreted = (backends.profile_by_key(backend) if backend else backends.detect()).interpreted
    return sorted(names, key=lambda name: not (interpreted and BY_NAME[name].interpreter_unreachable))
