"""`python -m conformance compile [--target LIST] [--out DIR] [--scope full|quick] [-n N]`
(registered by conformance.cli, which this module imports only when the command runs).

Exit codes: 0 every check passed; 1 any fail or error; 2 a bad argument.
"""

from __future__ import annotations

from conformance.compile_only.plan import SCOPES
from conformance.compile_only.targets import DEFAULT_TARGETS


def add_parser(commands) -> None:
    compile_ = commands.add_parser("compile", help="compile every bundled kernel configuration for GPU "
                                                   "targets, without a GPU")
    compile_.add_argument("--target", default=DEFAULT_TARGETS, metavar="LIST",
                          help=f"comma-separated sm_XY / gfxNNN / backend keys (default: every architecture family "
                               f"the kernels support, {DEFAULT_TARGETS}; one the installed triton cannot compile "
                               "for is unsupported)")
    compile_.add_argument("--out", metavar="DIR", help="run folder (default reports/runs/<time>-compile)")
    compile_.add_argument("--scope", default="full", choices=SCOPES,
                          help="full: every dtype, head dim and variant; quick: each table row once (CI); "
                               "sweep: every configuration of every kernel's tuning space")
    compile_.add_argument("-n", dest="workers", type=int, metavar="N",
                          help="compiler processes at a time (default: the CPU count)")


def command_compile(args) -> int:
    from conformance.compile_only.targets import parse_targets
    from conformance.compile_only.tier import run
    from conformance.usage import UsageError

    try:
        parse_targets(args.target)
    except ValueError as exc:
        raise UsageError(f"argument {exc}") from None
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"argument -n: expected a positive number of processes, got {args.workers}")
    return run(args.target, args.out, args.scope, args.workers)


COMMANDS = {"compile": command_compile}
