"""Hunting many mutants at once: `jobs` hunter processes, each taking one hunt after another.

A hunter is spawned (the backend is activated before any kernel is imported, and a CUDA
context is never forked) and runs its hunts' cases in its own process, which is fast; it
tells the parent through a pipe of each case it starts and ends (kill.Progress).  A mutant's
fault can take that process down (an out-of-bounds store segfaults the interpreter), leave
its GPU unusable (an illegal memory access poisons the CUDA context: every later case of the
process would `error`, and count as kills of mutants that never ran), or never return.  Such
a hunt does not take the table with it: its hunter is replaced, and the hunt goes on from the
case that was running (a lost device: from the next one; the case that broke it is a kill),
now with each case in an isolated worker (conformance.running.isolation), where the crash or
the hang is that case's `error` line -- a kill, as it is in a `conformance run` -- and the
line's `isolated_after` says what ended the first attempt.  A hunt lost again with its cases
isolated (the harness itself, not a case) is an `error` line.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import wait

from conformance import backends
from conformance.judging import verdicts
from conformance.running.isolation import exit_description
from conformance.bundled.mutants.definitions import BY_NAME
from conformance.bundled.mutants.kill import BROKEN, DeviceLost, Progress, hunt, mutant_line

# How long a hunt's first attempt may run before it counts as hung (default): a whole
# standard tier on a GPU takes minutes, the interpreter's smoke tier about as long.
HUNT_TIMEOUT_S = 3600.0


def _serve_hunts(channel, tier, backend, max_kills, shrink_s) -> None:
    """A hunter's process: hunts (name, Progress) as they come, each reported case by case
    (("case", rung, case id, kill)), then by its line (("line", line)); None ends it, and so
    does a case after which the device no longer works (("lost", why): its context is gone for
    every later case and hunt of this process)."""
    def report(rung, case_id, kill):
        channel.send(("case", rung, case_id, kill))

    while (task := channel.recv()) is not None:
        name, progress = task
        progress.on_case = report
        try:
            line = hunt(name, tier, backend, max_kills, shrink_s, progress)
        except DeviceLost as lost:
            channel.send(("lost", str(lost)))
            return
        channel.send(("line", line))


class _Hunter:
    """A hunter process, and what the parent has heard of the hunt it is on."""

    def __init__(self, context, arguments):
        self.channel, child = context.Pipe()
        self.process = context.Process(target=_serve_hunts, args=(child, *arguments))
        self.process.start()
        child.close()
        self.name = self.progress = self.line = self.current = None
        self.started, self.why_lost = 0.0, ""

    def assign(self, name: str, progress: Progress) -> None:
        self.name, self.progress, self.line, self.current = name, progress, None, None
        self.started = time.monotonic()
        self.channel.send((name, progress))

    def receive(self) -> None:
        """Take in what the hunt has sent (its progress, its line)."""
        while self.line is None and self.channel.poll():
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                return
            if message[0] == "line":
                self.line = message[1]
            elif message[0] == "lost":
                self.why_lost = message[1]
            else:
                self._note(*message[1:])

    def _note(self, rung: str, case_id: str, kill: dict | None) -> None:
        if kill is None:  # starting it
            self.current = case_id
        else:
            self.progress.record(rung, case_id, kill)

    def stop(self, kill: bool = False) -> None:
        """End the process: asked to (it is between hunts), or killed."""
        if self.process.is_alive() and not kill:
            try:
                self.channel.send(None)
                self.process.join(timeout=10)
            except OSError:
                pass
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.channel.close()


class _Hunts:
    """The hunts waiting and the hunters on them."""

    def __init__(self, names, jobs, arguments, hunt_timeout_s, case_timeout_s):
        self.context = multiprocessing.get_context("spawn")
        self.arguments = arguments
        self.hunt_timeout_s, self.case_timeout_s = hunt_timeout_s, case_timeout_s
        self.waiting = [(name, Progress()) for name in names]
        self.idle, self.busy = [], []
        self.jobs = max(1, min(jobs, len(names)))

    def start_next(self) -> None:
        while self.waiting and len(self.busy) < self.jobs:
            hunter = self.idle.pop() if self.idle else _Hunter(self.context, self.arguments)
            if not hunter.process.is_alive():  # ended after its last line
                hunter.stop(kill=True)
                continue
            hunter.assign(*self.waiting.pop(0))
            self.busy.append(hunter)

    def finished(self) -> list[dict]:
        """The lines of the hunts that ended since the last call; lost hunts go on isolated."""
        wait([h.channel for h in self.busy] + [h.process.sentinel for h in self.busy], timeout=5.0)
        lines = []
        for hunter in list(self.busy):
            hunter.receive()
            if hunter.line is not None:
                self.busy.remove(hunter)
                self.idle.append(hunter)
                lines.append(hunter.line)
            elif lost := self._lost(hunter):
                self.busy.remove(hunter)
                hunter.stop(kill=True)
                lines.extend(self._go_on_isolated(hunter, lost))
        return lines

    def _lost(self, hunter: _Hunter) -> str:
        """Why `hunter`'s hunt is lost ("" while it goes on)."""
        if not hunter.process.is_alive():
            hunter.receive()  # what it sent before it ended
            if hunter.line is not None:
                return ""  # taken as finished on the next call
            return hunter.why_lost or ("the hunt's process ended without a result "
                                       f"({exit_description(hunter.process.exitcode)})")
        if (not hunter.progress.isolated and self.hunt_timeout_s is not None
                and time.monotonic() - hunter.started > self.hunt_timeout_s):
            return f"the hunt ran past {self.hunt_timeout_s:g} s"
        return ""

    def _go_on_isolated(self, hunter: _Hunter, lost: str) -> list[dict]:
        progress = hunter.progress
        if progress.isolated:
            return [_lost_line(hunter.name, f"{lost}, its cases isolated", progress)]
        self.waiting.insert(0, (hunter.name, Progress(progress.done, progress.kills, progress.cases_run,
                                                      isolated=True, lost=lost, first=hunter.current,
                                                      case_timeout_s=self.case_timeout_s)))
        return []

    def stop(self) -> None:
        for hunter in self.idle + self.busy:
            hunter.stop(kill=hunter in self.busy)


def _lost_line(name: str, reason: str, progress: Progress) -> dict:
    """The line of a hunt lost with its cases isolated: a harness fault (`error`), with the
    kills and cases it got to."""
    return {**mutant_line(name, progress), "status": BROKEN, "verdict": verdicts.ERROR, "reason": reason}


def hunt_all(names: list[str], tier: str, backend: str | None = None, max_kills: int = 1,
             jobs: int = 1, on_result=None, shrink_s: float = 0,
             hunt_timeout_s: float | None = HUNT_TIMEOUT_S, case_timeout_s: float | None = None) -> list[dict]:
    """Hunt every mutant in `names`, `jobs` at a time (module doc); lines in `names` order.
    `on_result(line)` is called as each hunt finishes.  hunt_timeout_s: a first attempt's
    time (None: unbounded); case_timeout_s: an isolated case's (None: conformance.running.
    isolation's default)."""
    hunts = _Hunts(_longest_first(names, backend), jobs, (tier, backend, max_kills, shrink_s),
                   hunt_timeout_s, case_timeout_s)
    lines = {}
    try:
        while hunts.waiting or hunts.busy:
            hunts.start_next()
            for line in hunts.finished():
                lines[line["mutant"]] = line
                if on_result is not None:
                    on_result(line)
    finally:
        hunts.stop()
    return [lines[name] for name in names]


def _longest_first(names: list[str], backend: str | None) -> list[str]:
    """Submission order: hunts expected to run a whole tier (faults the interpreter
    cannot show) first, so they overlap with the many short ones."""
    interpreted = (backends.profile_by_key(backend) if backend else backends.detect()).interpreted
    return sorted(names, key=lambda name: not (interpreted and BY_NAME[name].interpreter_unreachable))
