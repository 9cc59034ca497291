"""`python -m conformance list | run | report`.

    list   --tier TIER                    one case id per line, nothing else on stdout
    run    [--tier TIER|auto] [--case ID ...] [--op OP ...] [--out DIR] [--backend KEY]
           [--kernel OP=MOD:FN|OP=sdpa:BACKEND ...] [--capabilities FILE] [--dropout-mask MOD:FN]
           [-n N|auto] [--seeds N] [--distribution SPEC]
           [--resume DIR] [--[no-]isolate] [--case-timeout S] [--[no-]check-determinism]
                                          runs pytest in-process with the plugin
                                          (conformance/run_options.py explains the last ones)
    report DIR [--format F]               summary.md, report.html, junit.xml; prints the table
    diff OLD NEW [--drift X]              regressions, fixes, new/removed, drift (exit 1 on a regression)
    matrix DIR...                         lines x triton versions
    probes [--backend KEY] [--probe ID ...] [--out DIR]
                                          the primitive probes alone, as a table
    compile [--target LIST] [--out DIR] [--scope full|quick] [-n N]
                                          compile every kernel config for GPU targets, no GPU needed

Exit codes: 0 all cases pass (or are unsupported/xfail); 1 any case is fail,
nonfinite, error or xpass, or the run stopped before every case finished;
2 usage error (a one-line message naming the argument) or no case selected.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance import backends, flake, run_options
from conformance.compile_only import command as compile_command
from conformance.catalog import OPS, select
from conformance.tiers import TIERS
from conformance.distributions import parse_optional
from conformance.implementations import Implementations
from conformance.reporting import commands as reporting_commands
from conformance.results import default_run_dir
from conformance.selection import of_ops, recorded_lines, reseeded
from conformance import verdicts
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
                     help="judge this implementation instead of the bundled kernel (or OP=sdpa:BACKEND)")
    run.add_argument("--op", action="append", default=[], choices=OPS,
                     help="only this operator's cases of the tier (repeatable)")
    run.add_argument("--capabilities", metavar="FILE",
                     help="TOML file declaring what the judged implementations support (conformance/capabilities.py)")
    run.add_argument("--dropout-mask", action="append", default=[], metavar="[OP=]MOD:FN",
                     help="recompute the keep mask of a kernel that returns (seed, offset) (conformance/dropout.py)")
    run_options.add_arguments(run)  # -n, --seeds, --distribution, --resume, --isolate, ...

    reporting_commands.add_parsers(commands)  # report, diff, matrix
    flake.add_parser(commands)
    compile_command.add_parser(commands)

    probes = commands.add_parser("probes", help="check the Triton primitives the kernels rely on, print a table")
    probes.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    probes.add_argument("--probe", action="append", default=[], metavar="ID",
                        help="run this probe only, e.g. 'probe.dot[bf16]' (repeatable)")
    probes.add_argument("--out", metavar="DIR", help="also write DIR/results.jsonl and DIR/env.json")
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
    profile = _profile(args.backend, activate=False) if args.tier == "auto" else None
    _, cases = _selection(args.tier, [], profile)
    sys.stdout.write("".join(f"{case.id}\n" for case in cases))
    return EXIT_OK


def pytest_arguments(args, out_dir: Path, profile) -> list[str]:
    """The in-process pytest command line that runs what `args` asks for."""
    return [str(SUITE_PATH), "-p", "conformance.plugin", "-p", "no:cacheprovider", "-v",
            "--conformance-out", str(out_dir), *run_options.plugin_arguments(args, profile)]


def _run_selection(args) -> tuple[dict, backends.BackendProfile, list]:
    """(selection, activated profile, selected cases) of a `run`, checked like the plugin will."""
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise UsageError("argument --out: a resumed run writes into its own folder (--resume DIR)")
    try:
        selection = run_options.selection_of(args)
    except ValueError as exc:
        raise UsageError(f"argument {exc}") from None
    profile = _profile(selection["backend"], activate=True)  # before anything imports the kernels
    _implementations(selection)
    _, cases = _selection(selection["tier"], selection["cases"], profile)
    cases = of_ops(cases, selection["ops"])
    if not cases:
        raise UsageError(f"argument --op: no case of {', '.join(selection['ops'])} selected")
    try:
        cases = reseeded(cases, selection["seeds"])
        parse_optional(selection["distribution"])
    except ValueError as exc:  # the messages start with the option's name
        raise UsageError(f"argument {exc}") from None
    return selection, profile, cases


def command_run(args) -> int:
    _, profile, cases = _run_selection(args)
    out_dir = Path(args.resume or args.out or default_run_dir(profile.key))

    import pytest

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
    profile = _profile(args.backend, activate=True)  # before the probe kernels are imported
    from tabulate import tabulate

    from conformance import probes
    from conformance.environment import command_line, fingerprint
    from conformance.reporting.summary import probe_table
    from conformance.results import ResultsWriter

    try:
        probes.select(args.probe)
    except ValueError as exc:
        raise UsageError(f"argument --probe: {exc}") from None
    lines = probes.run_probes(profile, args.probe, backend_option=args.backend)
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


COMMANDS = {"list": command_list, "run": command_run, "probes": command_probes, **reporting_commands.COMMANDS,
            **flake.COMMANDS, **compile_command.COMMANDS}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m conformance`; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
