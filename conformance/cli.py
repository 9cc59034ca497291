"""`python -m conformance COMMAND`: list the catalog, run and judge cases, render and compare reports.

    list   --tier TIER                    one case id per line, nothing else on stdout
    run    [--tier TIER|auto] [--case ID ...] [--op OP ...] [--out DIR] [--backend KEY]
           [--kernel OP=MOD:FN|OP=sdpa:BACKEND|OP=flex ...] [--capabilities FILE] [--dropout-mask MOD:FN]
           [-n N|auto] [--seeds N] [--distribution SPEC]
           [--resume DIR] [--[no-]isolate] [--case-timeout S] [--[no-]check-determinism]
                                          runs pytest in-process with the plugin
                                          (conformance/running/run_options.py explains the last ones)
    report DIR [--format F] [--shrink]    summary.md, report.html, junit.xml; prints the table
                                          (--shrink: also the smallest failing case of each failure)
    shrink CASE_ID [--backend KEY] [--kernel ...] [--budget S]
                                          the smallest case that still fails like CASE_ID
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

from conformance.cases.catalog import OPS
from conformance.cases.tiers import TIER_NAMES
from conformance.compile_only import command as compile_command
from conformance.diagnosing import shrink_command
from conformance.reporting import commands as reporting_commands
from conformance.robustness import flake_command
from conformance.running import commands, run_options
from conformance.usage import EXIT_USAGE, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, not a usage dump
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m conformance", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    tiers = [*TIER_NAMES, "auto"]

    listing = commands.add_parser("list", help="print the case ids of a tier")
    listing.add_argument("--tier", default="auto", choices=tiers)
    listing.add_argument("--backend", help="profile whose default tier 'auto' means (default: detected)")

    run = commands.add_parser("run", help="run cases and write a report folder")
    run.add_argument("--tier", default="auto", choices=tiers, help="default: the backend's default tier")
    run.add_argument("--case", action="append", default=[], metavar="ID", help="run this case (repeatable)")
    run.add_argument("--out", metavar="DIR", help="report folder (default reports/runs/<time>-<backend>)")
    run.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    run.add_argument("--kernel", action="append", default=[], metavar="OP=MOD:FN",
                     help="judge this implementation instead of the bundled kernel (or OP=sdpa:BACKEND, OP=flex)")
    run.add_argument("--op", action="append", default=[], choices=OPS,
                     help="only this operator's cases of the tier (repeatable)")
    run.add_argument("--capabilities", metavar="FILE",
                     help="TOML file declaring what the judged implementations support (conformance/running/capabilities.py)")
    run.add_argument("--dropout-mask", action="append", default=[], metavar="[OP=]MOD:FN",
                     help="recompute the keep mask of a kernel that returns (seed, offset) (conformance/judging/dropout.py)")
    run_options.add_arguments(run)  # -n, --seeds, --distribution, --resume, --isolate, ...

    reporting_commands.add_parsers(commands)  # report, diff, matrix
    flake_command.add_parser(commands)
    compile_command.add_parser(commands)
    shrink_command.add_parser(commands)

    probes = commands.add_parser("probes", help="check the Triton primitives the kernels rely on, print a table")
    probes.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    probes.add_argument("--probe", action="append", default=[], metavar="ID",
                        help="run this probe only, e.g. 'probe.dot[bf16]' (repeatable)")
    probes.add_argument("--out", metavar="DIR", help="also write DIR/results.jsonl and DIR/env.json")
    return parser


COMMANDS = {**commands.COMMANDS, **reporting_commands.COMMANDS, **flake_command.COMMANDS, **compile_command.COMMANDS,
            **shrink_command.COMMANDS}


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m conformance`; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
