"""The reporting side of a conformance session: results lines into results.jsonl, the
primitive probes before the first case, the report at the end.

Registered by conformance.running.plugin in the process that receives every
`pytest_runtest_logreport` (the only process, or the pytest-xdist controller). A
case item carries its results line in `user_properties` (RESULT_PROPERTY); an item
that died without one (a harness bug, a crashed xdist worker) is recorded as `error`
here, so every selected case that ran leaves a line.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from conformance.cases.catalog import Case
from conformance.probing.attribution import with_backend_fault
from conformance.probing.probe_runs import run_probes
from conformance.probing.probes import is_probe_line
from conformance.reporting.report import render_run
from conformance.running.environment import command_line, fingerprint
from conformance.running.results import ResultsWriter, from_json, read_env, write_env
from conformance.running.selection import recorded_lines, resumed_env

RESULT_PROPERTY = "conformance_result"
SUITE_FILE = "suite.py"  # conformance/suite.py: the catalog's pytest file


def result_line(report) -> dict | None:
    """The results line a report carries, if any."""
    for name, value in getattr(report, "user_properties", ()):
        if name == RESULT_PROPERTY:
            return from_json(value)
    return None


def case_of_nodeid(nodeid: str) -> Case | None:
    """The case a conformance node id names (`.../suite.py::<case id>`), else None."""
    path, separator, name = nodeid.rpartition("::")
    if not separator or Path(path).name != SUITE_FILE:
        return None
    try:
        return Case.from_id(name)
    except ValueError:
        return None


class ResultsRecorder:
    """Writes results lines and the final report; lives in the reporting process only.

    It also times the run's own costs (env.json's `timing`; conformance.reporting.time_breakdown):
    wall time from configuration to the report, the probes, writing results lines, rendering."""

    def __init__(self, state, workers: int = 1):  # state: the plugin's ConformanceState
        self.state = state
        self.probe_lines: list[dict] = []
        self.timing = {"workers": workers, "wall_s": None, "probes_s": 0.0, "results_s": 0.0, "report_s": None}
        self._started = time.perf_counter()

    def _record(self, line: dict) -> None:
        state = self.state
        if state.writer is None:
            env = fingerprint(state.profile, tier=state.tier, implementations=state.implementations.describe(),
                              command=command_line())
            env["selection"] = state.selection
            env["triton_cache"] = os.environ.get("TRITON_CACHE_DIR")  # conformance.running.triton_cache
            env["checks"] = {"determinism": bool(state.run_options.get("check_determinism"))}
            declarations = state.implementations.declarations()
            if declarations:
                env["capabilities"] = declarations
            if state.resuming:
                env = resumed_env(state.run_dir(), env)
            state.writer = ResultsWriter(state.run_dir(), env, append=state.resuming)
            self._record_probes()
        started = time.perf_counter()
        state.writer.append(with_backend_fault(line, self.probe_lines))
        self.timing["results_s"] += time.perf_counter() - started
        state.recorded.add(line["case"])

    def _record_probes(self) -> None:
        """The primitive probes, run here (the reporting process) and written before any case;
        a resumed run keeps those its folder already holds."""
        if self.state.resuming:
            self.probe_lines = [line for line in recorded_lines(self.state.run_dir()) if is_probe_line(line)]
            if self.probe_lines:
                return
        started = time.perf_counter()
        self.probe_lines = run_probes(self.state.profile, backend_option=self.state.backend_option)
        self.timing["probes_s"] = time.perf_counter() - started
        for probe_line in self.probe_lines:
            self.state.writer.append(probe_line)

    def pytest_runtest_logreport(self, report):
        line = result_line(report) or self._line_for_lost_case(report)
        if line is not None and line["case"] not in self.state.recorded:
            self._record(line)

    def _line_for_lost_case(self, report) -> dict | None:
        """An error line for a conformance item that failed without producing a line."""
        case = case_of_nodeid(report.nodeid)
        if case is None or report.passed or report.when not in ("setup", "call", "???"):
            return None
        last_line = (report.longreprtext.strip().splitlines() or [""])[-1]
        if report.when == "???":  # pytest-xdist's report for a worker that died mid-case
            reason = f"process crashed: {last_line}"
        else:
            reason = f"no result ({report.when} failed): {last_line}"
        return self.state.error_line(case, reason, report.longreprtext[-4000:])

    def pytest_terminal_summary(self, terminalreporter):
        if self.state.writer is None:
            return
        terminalreporter.write_sep("=", "conformance summary")
        self.timing["wall_s"] = time.perf_counter() - self._started
        self._store_timing()
        started = time.perf_counter()
        terminalreporter.write(render_run(self.state.run_dir()))
        self.timing["report_s"] = time.perf_counter() - started
        self._store_timing()  # a later `conformance report DIR` shows the rendering's cost too

    def _store_timing(self) -> None:
        env = read_env(self.state.run_dir())
        env["timing"] = {key: round(value, 3) if isinstance(value, float) else value
                         for key, value in self.timing.items()}
        write_env(self.state.run_dir(), env)

    def pytest_unconfigure(self, config):
        if self.state.writer is not None:
            self.state.writer.close()
