"""`python -m conformance list | run | report`.

    list   --tier TIER                    one case id per line, nothing else on stdout
    run    [--tier TIER|auto] [--case ID ...] [--out DIR] [--backend KEY]
           [--kernel OP=MOD:FN ...] [-n N]  runs pytest in-process with the plugin
    report DIR                            re-renders DIR/summary.md, prints the table

Exit codes: 0 all cases pass (or are unsupported/xfail); 1 any case is fail,
nonfinite, error or xpass, or the run stopped before every case finished;
2 usage error (a one-line message naming the argument) or no case selected.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance import backends
from conformance.catalog import TIERS, select
from conformance.implementations import Implementations
from conformance.results import RESULTS_FILE, default_run_dir, read_results
from conformance.verdicts import run_failed

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SUITE_PATH = Path(__file__).with_name("suite.py").resolve()


class UsageError(Exception):
    """A bad argument: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, not a usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    tiers = [*TIERS, "auto"]

    listing = commands.add_parser("list", help="print the case ids of a tier")
    listing.add_argument("--tier", default="auto", choices=tiers)
    listing.add_argument("--backend", help="profile whose default tier 'auto' means (default: detected)")

    run = commands.add_parser("run", help="run cases and write a report folder")
    run.add_argument("--tier", default="auto", choices=tiers, help="default: the backend's default tier")
    run.add_argument("--case", action="append", default=[], metavar="ID", help="run this case (repeatable)")
    run.add_argument("--out", metavar="DIR", help="report folder (default reports/runs/<time>-<backend>)")
    run.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    run.add_argument("--kernel", action="append", default=[], metavar="OP=MOD:FN",
                     help="judge this implementation instead of the bundled kernel")
    run.add_argument("-n", dest="workers", type=int, metavar="N", help="pytest-xdist worker processes")

    report = commands.add_parser("report", help="re-render a run folder's summary")
    report.add_argument("run_dir", metavar="DIR")
    return parser


def _profile(backend: str | None, activate: bool) -> backends.BackendProfile:
    try:
        if activate:
            return backends.activate(backend)
        return backends.profile_by_key(backend) if backend else backends.detect()
    except ValueError as exc:
        raise UsageError(f"argument --backend: {str(exc).removeprefix('--backend: ')}") from None


def _selection(tier: str, case_ids: list[str], profile) -> tuple[str, list]:
    try:
        label, cases = select(tier, case_ids, profile)
    except ValueError as exc:
        raise UsageError(f"argument --case: {exc}") from None
    if not cases:
        raise UsageError("no case selected")
    return label, cases


def _implementations(specs: list[str]) -> Implementations:
    try:
        implementations = Implementations.from_specs(specs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for op, target in implementations.overrides.items():
        try:
            implementations.resolve(op)
        except Exception as exc:  # whatever the user's module raises on import
            raise UsageError(f"argument --kernel: cannot load {op}={target}: {type(exc).__name__}: {exc}") from None
    return implementations


def command_list(args) -> int:
    profile = _profile(args.backend, activate=False) if args.tier == "auto" else None
    _, cases = _selection(args.tier, [], profile)
    sys.stdout.write("".join(f"{case.id}\n" for case in cases))
    return EXIT_OK


def pytest_arguments(args, out_dir: Path) -> list[str]:
    """The in-process pytest command line that runs what `args` asks for."""
    arguments = [str(SUITE_PATH), "-p", "conformance.plugin", "-p", "no:cacheprovider", "-v",
                 "--conformance-tier", args.tier, "--conformance-out", str(out_dir)]
    for case_id in args.case:
        arguments += ["--conformance-case", case_id]
    if args.backend:
        arguments += ["--conformance-backend", args.backend]
    for spec in args.kernel:
        arguments += ["--conformance-kernel", spec]
    if args.workers:
        arguments += ["-n", str(args.workers)]
    return arguments


def command_run(args) -> int:
    profile = _profile(args.backend, activate=True)  # before anything imports the kernels
    _implementations(args.kernel)
    _, cases = _selection(args.tier, args.case, profile)
    out_dir = Path(args.out) if args.out else default_run_dir(profile.key)

    import pytest

    exit_code = pytest.main(pytest_arguments(args, out_dir))
    if exit_code == pytest.ExitCode.USAGE_ERROR:
        return EXIT_USAGE
    lines = read_results(out_dir) if (out_dir / RESULTS_FILE).exists() else []
    if len(lines) < len(cases):
        print(f"conformance: only {len(lines)} of {len(cases)} cases finished (pytest exit code {int(exit_code)})",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if run_failed(line["verdict"] for line in lines) else EXIT_OK


def command_report(args) -> int:
    from conformance.report import render_run

    run_dir = Path(args.run_dir)
    if not (run_dir / RESULTS_FILE).exists():
        raise UsageError(f"argument DIR: no {RESULTS_FILE} in {run_dir}")
    sys.stdout.write(render_run(run_dir))
    return EXIT_OK


COMMANDS = {"list": command_list, "run": command_run, "report": command_report}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m conformance`; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
