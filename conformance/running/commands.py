"""The `list`, `run` and `probes` commands: select cases, run them in-process under
pytest with the plugin, and turn the recorded verdicts into an exit code."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from conformance import backends
from conformance.cases.catalog import OPS
from conformance.cases.sweep import SCOPES as SWEEPS
from conformance.cases.distributions import parse_optional
from conformance.running.selection import of_ops, recorded_lines, refined
from conformance.cases.tiers import select
from conformance.judging import verdicts
from conformance.judging.verdicts import run_failed
from conformance.running import run_options, triton_cache
from conformance.running.implementations import Implementations
from conformance.running.configurations import cost_estimate
from conformance.running.plugin import SUITE_PATH
from conformance.running.results import default_run_dir
from conformance.usage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, backend_profile


def _selection(tier: str, case_ids: list[str], profile) -> tuple[str, list]:
    try:
        label, cases = select(tier, case_ids, profile)
    except ValueError as exc:
        raise UsageError(f"argument --case: {exc}") from None
    if not cases:
        raise UsageError("no case selected")
    return label, cases


def _implementations(selection: dict) -> Implementations:
    """The selection's implementations, each imported and its declaration read: UsageError naming
    the option (--kernel, --dropout-mask, --capabilities) for anything that does not load."""
    try:
        implementations = Implementations.from_selection(selection)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for op, target in implementations.overrides.items():
        _load(f"--kernel: cannot load {op}={target}", implementations.resolve, op)
    for op, target in implementations.dropout_masks.items():
        _load(f"--dropout-mask: cannot load {target}", implementations.dropout_mask, op)
    for op in OPS:
        where = "--capabilities" if implementations.capabilities_file else "--kernel"
        _load(f"{where}: bad capabilities of {op}", implementations.capabilities, op)
    return implementations


def _load(what: str, load, op: str) -> None:
    try:
        load(op)
    except Exception as exc:  # whatever the user's module raises on import
        message = str(exc).removeprefix("argument --kernel: ")
        raise UsageError(f"argument {what}: {type(exc).__name__}: {message}") from None


def command_list(args) -> int:
    profile = backend_profile(args.backend, activate=False) if args.tier == "auto" or args.tier in SWEEPS else None
    _, cases = _selection(args.tier, [], profile)
    sys.stdout.write("".join(f"{case.id}\n" for case in cases))
    return EXIT_OK


def pytest_arguments(args, out_dir: Path, profile) -> list[str]:
    """The in-process pytest command line that runs what `args` asks for.

    A pytest of its own, whatever directory the command runs in: no configuration file
    (`-c` the null device: another repository's addopts or filterwarnings would change
    how cases run) and no conftest.py above the harness's folder (which would import
    that repository's code into the run)."""
    harness = SUITE_PATH.parent
    return [str(SUITE_PATH), "-c", os.devnull, "--rootdir", str(harness.parent), "--confcutdir", str(harness),
            "-p", "conformance.running.plugin", "-p", "no:cacheprovider", "-v",
            "--conformance-out", str(out_dir), *run_options.plugin_arguments(args, profile)]


@contextlib.contextmanager
def _own_plugins_only():
    """The run's pytest loads the plugins it names (the catalog's, xdist's) and no others that
    happen to be installed: each of its processes -- one per worker -- would import them all
    (coverage, benchmark, hypothesis, ...) at start, for nothing. Inherited by the workers."""
    previous = os.environ.get(_NO_AUTOLOAD)
    os.environ[_NO_AUTOLOAD] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_NO_AUTOLOAD, None)
        else:
            os.environ[_NO_AUTOLOAD] = previous


_NO_AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


def _run_selection(args) -> tuple[dict, backends.BackendProfile, list]:
    """(selection, activated profile, selected cases) of a `run`, checked like the plugin will."""
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise UsageError("argument --out: a resumed run writes into its own folder (--resume DIR)")
    try:
        selection = run_options.selection_of(args)
    except ValueError as exc:
        raise UsageError(f"argument {exc}") from None
    profile = backend_profile(selection["backend"], activate=True)  # before anything imports the kernels
    _implementations(selection)
    _, cases = _selection(selection["tier"], selection["cases"], profile)
    if not of_ops(cases, selection["ops"]):
        raise UsageError(f"argument --op: no case of {', '.join(selection['ops'])} selected")
    try:
        cases = refined(cases, selection, profile)
        parse_optional(selection["distribution"])
    except ValueError as exc:  # the messages start with the option's name
        raise UsageError(f"argument {exc}") from None
    return selection, profile, cases


def command_run(args) -> int:
    _, profile, cases = _run_selection(args)
    out_dir = Path(args.resume or args.out or default_run_dir(profile.key))
    workers = run_options.xdist_workers(args.workers, profile)
    plan = run_options.worker_plan_text(args.workers, profile)
    if plan:
        print(f"conformance: {plan}", flush=True)
    print(f"conformance: Triton cache {triton_cache.use_shared_cache()}", flush=True)
    if any(case.config for case in cases):
        print(cost_estimate(cases, profile, workers), flush=True)

    import pytest

    with _own_plugins_only():
        exit_code = pytest.main(pytest_arguments(args, out_dir, profile))
    if exit_code == pytest.ExitCode.USAGE_ERROR:
        return EXIT_USAGE
    # probes inform, cases decide -- except a probe whose known issue no longer fails (xpass: a stale entry)
    lines = [line for line in recorded_lines(out_dir)
             if line.get("kind") != "probe" or line["verdict"] == verdicts.XPASS]
    recorded = {line["case"] for line in lines}
    finished = sum(case.id in recorded for case in cases)
    if finished < len(cases):
        print(f"conformance: only {finished} of {len(cases)} cases finished (pytest exit code {int(exit_code)})",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if run_failed(line["verdict"] for line in lines) else EXIT_OK


def command_probes(args) -> int:
    """Exit 1 iff a probe fails (or errs) that the profile does not work around."""
    profile = backend_profile(args.backend, activate=True)  # before the probe kernels are imported
    from tabulate import tabulate

    from conformance.probing import probe_runs, probes
    from conformance.reporting.summary import probe_table
    from conformance.running.environment import command_line, fingerprint
    from conformance.running.results import ResultsWriter

    try:
        probes.select(args.probe)
    except ValueError as exc:
        raise UsageError(f"argument --probe: {exc}") from None
    lines = probe_runs.run_probes(profile, args.probe, backend_option=args.backend)
    headers, rows = probe_table(lines)
    print(f"Primitive probes on {profile.key}:", tabulate(rows, headers=headers, disable_numparse=True),
          *probes.tolerance_notes(lines), sep="\n")
    if args.out:
        writer = ResultsWriter(args.out, fingerprint(profile, tier="probes", implementations={},
                                                     command=command_line()))
        for line in lines:
            writer.append(line)
        writer.close()
    return EXIT_FAILED if probes.unhandled_failures(lines) else EXIT_OK


COMMANDS = {"list": command_list, "run": command_run, "probes": command_probes}
