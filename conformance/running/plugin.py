"""The pytest plugin: catalog cases as test items, one results line per case.

Registered by conformance.pytest_plugin when a run asks for the catalog (that light
entry point declares the `--conformance-*` options this plugin reads), by the
repository's root conftest.py for the harness's own tests, and with `-p` by the CLI
(which has imported it already: PYTEST_DONT_REWRITE, it has no asserts to rewrite).

* `pytest_configure` activates the backend profile first -- before anything can
  import the kernels (the interpreter needs TRITON_INTERPRET=1 set early).
* `conformance/suite.py`, when collected, becomes one `CaseItem` per selected case.
* An item runs its case -- in this process, or with isolation (the default on
  GPUs) in a worker process that turns a crash or a hang into an `error` line
  (conformance.running.isolation) -- and attaches the results line to `item.user_properties`;
  the verdict becomes the pytest outcome (pass; fail/nonfinite/error/xpass ->
  failed; unsupported -> skipped; xfail -> xfailed).
* The process that receives `pytest_runtest_logreport` (the only process, or the
  pytest-xdist controller) appends the line to results.jsonl. A case whose item
  died without a line (a harness bug, a crashed xdist worker) is recorded as
  `error` there, so every selected case that ran leaves a line.
* `pytest_terminal_summary` prints the table and writes summary.md.
* `--conformance-resume DIR` continues a run folder with its recorded selection,
  skipping the cases it holds (conformance.running.selection); under pytest-xdist each
  worker is pinned to a GPU of its own (conformance.running.devices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance import backends
from conformance.cases.catalog import Case
from conformance.pytest_plugin import ADD_CATALOG, SWITCHES
from conformance.cases.distributions import parse_optional
from conformance.running.selection import recorded_ids, resumed_selection, selected_cases
from conformance.judging import verdicts
from conformance.judging.verdicts import error_fields
from conformance.reporting.report import format_ratio
from conformance.running.devices import pin_xdist_worker, record_device
from conformance.running.implementations import Implementations, reproduce_command
from conformance.running import triton_cache
from conformance.running.parallelism import threads_per_worker
from conformance.running.isolation import DEFAULT_TIMEOUT_S, IsolatedRunner, default_timeout_s
from conformance.running.recorder import RESULT_PROPERTY, SUITE_FILE, ResultsRecorder, result_line
from conformance.running.results import ResultsWriter, default_run_dir, to_json
from conformance.running.run_options import SELECTION_ARGUMENTS
from conformance.running.runner import error_line, distribution_args, run_case

SUITE_PATH = Path(__file__).resolve().parent.parent / SUITE_FILE
SUITE_NODEID = f"{SUITE_PATH.parent.name}/{SUITE_PATH.name}"  # conformance/suite.py, wherever it is installed
pytest_plugins = ["conformance.pytest_plugin"]  # the options, wherever this plugin is registered from


@dataclass
class ConformanceState:
    """Per-process settings of a conformance session, kept in `config.stash`."""

    profile: backends.BackendProfile
    implementations: Implementations
    backend_option: str | None
    tier: str
    cases: list[Case]
    out_dir: Path | None
    recorded: set = field(default_factory=set)
    writer: ResultsWriter | None = None
    selection: dict = field(default_factory=dict)  # conformance.running.selection; recorded in env.json
    resuming: bool = False
    run_options: dict = field(default_factory=dict)  # run_case's check_determinism, distribution
    isolate: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S["cpu"]
    device_index: int | None = None  # the GPU this xdist worker is pinned to
    threads: int | None = None  # torch CPU threads of the process running cases (parallelism.threads_per_worker)
    isolated: IsolatedRunner | None = None

    def reproduce(self, case: Case) -> str:
        return reproduce_command(case.id, self.backend_option, self.implementations,
                                 distribution_args(self.run_options.get("distribution")))

    def error_line(self, case: Case, reason: str, traceback: str = "") -> dict:
        """A results line for a case that produced none of its own."""
        line = error_line(case, self.profile.key, self.implementations.name(case.op), self.reproduce(case),
                          reason, traceback)
        if self.run_options.get("distribution") is not None:
            line["distribution"] = self.run_options["distribution"].spec
        return line

    def run(self, case: Case) -> dict:
        """The case's results line, computed in this process or in an isolated worker."""
        if not self.isolate:
            line = run_case(case, self.profile, self.implementations, backend_option=self.backend_option,
                            **self.run_options)
            return record_device(line, self.profile.device)
        line = self.isolated_runner().run(case)
        if line.get("device_index") is None and self.device_index is not None:
            # a case that crashed its worker (whose CUDA context can no longer be asked):
            # the GPU this xdist worker, and so its isolated worker, is pinned to
            line["device_index"] = self.device_index
        return line

    def isolated_runner(self) -> IsolatedRunner:
        if self.isolated is None:
            self.isolated = IsolatedRunner(self.worker_config(), self.timeout_s, self.error_line)
        return self.isolated

    def worker_config(self) -> dict:
        """What an isolated worker needs to run cases as this process would (conformance.running.worker)."""
        return {"backend": self.profile.key, "backend_option": self.backend_option,
                "kernels": list(self.selection.get("kernels") or []), "device_index": self.device_index,
                "threads": self.threads,
                "capabilities": self.selection.get("capabilities"),
                "dropout_masks": list(self.selection.get("dropout_masks") or []),
                "check_determinism": self.run_options.get("check_determinism", False),
                "distribution": self.selection.get("distribution")}

    def run_dir(self) -> Path:
        if self.out_dir is None:
            self.out_dir = default_run_dir(self.profile.key)
        return self.out_dir


_STATE = pytest.StashKey[ConformanceState]()


# selection key (conformance.running.selection) -> pytest option dest, e.g. "conformance_tier"
_SELECTION_OPTIONS = {key: option.removeprefix("--").replace("-", "_")
                      for key, (_, option) in SELECTION_ARGUMENTS.items()}


def _selection_from_options(config) -> dict:
    given = {key: config.getoption(option) for key, option in _SELECTION_OPTIONS.items()}
    resume = config.getoption("conformance_resume")
    try:
        return resumed_selection(resume, given) if resume else given
    except ValueError as exc:
        raise pytest.UsageError(f"conformance: {exc}") from None


def _switch(config, option: str, gpu: bool) -> bool:
    value = SWITCHES[config.getoption(option)]
    return gpu if value is None else value


def _state_from_options(config, selection: dict, device_index: int | None = None) -> ConformanceState:
    try:
        profile = backends.activate(selection["backend"])
        implementations = Implementations.from_selection(selection)
        distribution = parse_optional(selection["distribution"])
        tier, cases = selected_cases(selection, profile)
    except ValueError as exc:
        raise pytest.UsageError(f"conformance: {exc}") from None
    resume = config.getoption("conformance_resume")
    out = resume or config.getoption("conformance_out")
    recorded = recorded_ids(resume) if resume else set()
    gpu = profile.device == "cuda"
    return ConformanceState(
        profile, implementations, selection["backend"], tier, [case for case in cases if case.id not in recorded],
        Path(out) if out else None, recorded=recorded, selection=selection, resuming=bool(resume),
        run_options=dict(check_determinism=_switch(config, "conformance_determinism", gpu), distribution=distribution),
        isolate=_switch(config, "conformance_isolate", gpu), device_index=device_index,
        timeout_s=config.getoption("conformance_case_timeout")
        or default_timeout_s(profile.device))


def _refuse_absent_backend(backend: str | None) -> None:
    """A --conformance-backend naming a device this machine lacks is a usage error (backends.absence)."""
    try:
        absent = backends.absence(backends.profile_by_key(backend)) if backend else None
    except ValueError as exc:
        raise pytest.UsageError(f"conformance: {exc}") from None
    if absent:
        raise pytest.UsageError(f"conformance: --conformance-backend: {absent}")


def pytest_configure(config):
    selection = _selection_from_options(config)
    worker_id = getattr(config, "workerinput", {}).get("workerid")
    if worker_id is None:  # xdist workers run what their controller checked
        _refuse_absent_backend(selection["backend"])
    # before anything touches CUDA: backend detection reads the current device
    device_index = pin_xdist_worker(worker_id, selection["backend"], backends.interpreter_requested())
    state = config.stash[_STATE] = _state_from_options(config, selection, device_index)
    state.threads = threads_per_worker(getattr(config, "workerinput", {}).get("workercount", 1))
    if state.threads is not None and not state.isolate:
        import torch

        torch.set_num_threads(state.threads)
    config.addinivalue_line("markers", "conformance: a conformance catalog case")
    if not hasattr(config, "workerinput"):  # xdist workers only run items (and inherit the cache folder)
        triton_cache.use_shared_cache()
        recorder = ResultsRecorder(config.stash[_STATE], workers=xdist_worker_count(config))
        config.pluginmanager.register(recorder, "conformance-recorder")


def xdist_worker_count(config) -> int:
    """How many processes run cases: pytest-xdist's -n (1 without xdist)."""
    count = getattr(config.option, "numprocesses", None)
    return count if isinstance(count, int) and count > 0 else 1


def pytest_collection_finish(session):
    """Start the isolated case process as soon as this process knows it will run cases (an
    xdist worker, or the only process), so that its start overlaps the session's."""
    state = session.config.stash.get(_STATE, None)
    if state is not None and state.isolate and any(isinstance(item, CaseItem) for item in session.items):
        state.isolated_runner().start()


def pytest_unconfigure(config):
    state = config.stash.get(_STATE, None)
    if state is not None and state.isolated is not None:
        state.isolated.close()


def is_suite_path(path) -> bool:
    """conformance/suite.py of this or any other checkout/installation of the harness."""
    path = Path(path)
    return path.name == SUITE_PATH.name and path.parent.name == SUITE_PATH.parent.name


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    if not is_suite_path(module_path):
        return None
    path = Path(module_path)
    try:
        path.relative_to(parent.config.rootpath)
        nodeid = None  # pytest's own: the path relative to the run's root
    except ValueError:  # an installed harness run from another repository: pytest would name it ""
        nodeid = SUITE_NODEID
    return CatalogFile.from_parent(parent, path=path, nodeid=nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """The catalog as one more collector of the session when no argument names its file
    (conformance.pytest_plugin decides): pytest would not find it by path inside a
    virtualenv, where an installed harness often is."""
    report = yield
    if isinstance(collector, pytest.Session) and report.passed and collector.config.stash.get(ADD_CATALOG, False):
        report.result.append(CatalogFile.from_parent(collector, path=SUITE_PATH, nodeid=SUITE_NODEID))
    return report


class CatalogFile(pytest.File):
    """conformance/suite.py, collected as the session's selected cases."""

    def collect(self):
        for case in self.config.stash[_STATE].cases:
            yield CaseItem.from_parent(self, name=case.id, case=case)


class CaseNotPassing(Exception):
    """Raised by a CaseItem whose verdict fails the run; its text is the report."""


class CaseItem(pytest.Item):
    """One catalog case as a test item."""

    def __init__(self, *, case: Case, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.add_marker("conformance")
        # The rule judges the case, not the warnings on the way (the interpreter warns about
        # NaN inputs): a project's `filterwarnings = error` must not turn them into errors.
        self.add_marker(pytest.mark.filterwarnings("default"))

    def runtest(self):
        state = self.config.stash[_STATE]
        try:
            line = state.run(self.case)
        except Exception as exc:  # a harness bug: still leave a line for this case
            fields = error_fields(exc, prefix="harness: ")
            self.user_properties.append((RESULT_PROPERTY, to_json(state.error_line(self.case, **fields))))
            raise
        self.user_properties.append((RESULT_PROPERTY, to_json(line)))
        _raise_for_verdict(line)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CaseNotPassing):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        # Not the bare id: pytest would rewrite its "." to "::" in verbose lines,
        # printing the id wrongly (it only does that when the nodeid ends with it).
        return self.path, None, f"case {self.case.id}"


def _raise_for_verdict(line: dict) -> None:
    verdict = line["verdict"]
    if verdict == verdicts.PASS:
        return
    if verdict == verdicts.UNSUPPORTED:
        pytest.skip(line["reason"])
    if verdict == verdicts.XFAIL:
        issue = line["known_issue"]
        pytest.xfail(f"known issue {issue['id']}: {issue['description']} ({line['reason']})")
    raise CaseNotPassing(failure_message(line))


def failure_message(line: dict) -> str:
    """The concise text of a non-passing case: verdict, reason, ratios, reproducer."""
    parts = [f"{line['verdict']}: {line['reason']}"]
    for tensor in line.get("tensors", []):
        parts.append(f"  {tensor['name']:>3}: ratio {format_ratio(tensor['ratio'])} (kernel_err "
                     f"{tensor['kernel_err']:.3e}, torch_err {tensor['torch_err']:.3e}, floor {tensor['floor']:.3e})")
    if line.get("traceback"):
        parts.append(line["traceback"])
    parts.append(f"reproduce: {line['reproduce']}")
    return "\n".join(parts)


_TEST_STATUS = {
    verdicts.PASS: ("passed", ".", {"green": True}),
    verdicts.FAIL: ("failed", "F", {"red": True}),
    verdicts.NONFINITE: ("failed", "N", {"red": True}),
    verdicts.ERROR: ("failed", "E", {"red": True}),
    verdicts.XPASS: ("failed", "X", {"red": True}),
    verdicts.XFAIL: ("xfailed", "x", {"yellow": True}),
    verdicts.UNSUPPORTED: ("skipped", "s", {"yellow": True}),
}


def pytest_report_teststatus(report, config):
    """Verdict words (with the worst ratio) in verbose progress."""
    if report.when != "call":
        return None
    line = result_line(report)
    if line is None:
        return None
    category, letter, markup = _TEST_STATUS[line["verdict"]]
    word = line["verdict"]
    if line.get("worst_ratio") is not None:
        word += f" {format_ratio(line['worst_ratio'])}"
    return category, letter, (word, markup)
