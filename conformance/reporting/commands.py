"""The reporting subcommands of `python -m conformance` (registered by conformance.cli).

    report DIR [--format all|terminal|markdown|html|junit|jsonl] [--output FILE]
    diff OLD NEW [--drift X] [--format terminal|markdown] [--output FILE]
    matrix DIR... [--drift X] [--format terminal|markdown|html] [--output FILE]

`report` with the default format `all` (re)writes summary.md, report.html and
junit.xml into DIR and prints the terminal report; a single format is printed
(or written to --output) and nothing else is touched. `diff` exits 1 iff some id
regressed. Bad arguments exit 2 (conformance.usage.UsageError).
"""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.reporting.diff import DEFAULT_DRIFT
from conformance.running.results import RESULTS_FILE
from conformance.usage import EXIT_FAILED, EXIT_OK, UsageError

REPORT_FORMATS = ("all", "terminal", "markdown", "html", "junit", "jsonl")


def add_parsers(commands) -> None:
    """Add `report`, `diff` and `matrix` to the CLI's subparsers."""
    report = commands.add_parser("report", help="render a run folder's reports from its results")
    report.add_argument("run_dir", metavar="DIR")
    report.add_argument("--format", default="all", choices=REPORT_FORMATS,
                        help="all (default): write summary.md, report.html, junit.xml into DIR and print the table")
    report.add_argument("--output", metavar="FILE", help="write a single format here instead of stdout")

    compare = commands.add_parser("diff", help="regressions, fixes, new/removed ids and ratio drift between runs")
    compare.add_argument("old", metavar="OLD", help="run folder of the baseline")
    compare.add_argument("new", metavar="NEW", help="run folder to judge")
    compare.add_argument("--drift", type=float, default=DEFAULT_DRIFT, metavar="X",
                         help=f"report a tensor's ratio moving by more than X (absolute; default {DEFAULT_DRIFT})")
    compare.add_argument("--format", default="terminal", choices=("terminal", "markdown"))
    compare.add_argument("--output", metavar="FILE", help="write the table here instead of stdout")

    matrix = commands.add_parser("matrix", help="lines x triton versions from several run folders")
    matrix.add_argument("dirs", nargs="+", metavar="DIR", help="run folders, or folders holding them")
    matrix.add_argument("--drift", type=float, default=DEFAULT_DRIFT, metavar="X",
                        help=f"mark a tensor's ratio moving by more than X between versions (default {DEFAULT_DRIFT})")
    matrix.add_argument("--format", default="terminal", choices=("terminal", "markdown", "html"))
    matrix.add_argument("--output", metavar="FILE", help="write the matrix here instead of stdout")


def _usage_error(message: str) -> Exception:
    return UsageError(message)


def _exit_code(failed: bool) -> int:
    return EXIT_FAILED if failed else EXIT_OK


def _run_folder(path: str, argument: str) -> Path:
    folder = Path(path)
    if not (folder / RESULTS_FILE).exists():
        raise _usage_error(f"argument {argument}: no {RESULTS_FILE} in {folder}")
    return folder


def _emit(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def command_report(args) -> int:
    from conformance.reporting.report import render, render_run

    run_dir = _run_folder(args.run_dir, "DIR")
    if args.format == "all":
        if args.output:
            raise _usage_error("argument --output: needs a single --format")
        sys.stdout.write(render_run(run_dir))
    else:
        _emit(render(run_dir, args.format), args.output)
    return _exit_code(False)


def command_diff(args) -> int:
    from conformance.reporting import diff
    from conformance.running.results import read_env, read_results

    old, new = _run_folder(args.old, "OLD"), _run_folder(args.new, "NEW")
    changes = diff.compare(read_results(old), read_results(new), args.drift)
    _emit(diff.render(read_env(old), read_env(new), changes, args.format, args.drift), args.output)
    return _exit_code(diff.has_regression(changes))


def command_matrix(args) -> int:
    from conformance.reporting.matrix import load_matrix, render

    matrix = load_matrix(args.dirs, args.drift)
    if not matrix.columns:
        raise _usage_error(f"argument DIR: no {RESULTS_FILE} in or below {', '.join(args.dirs)}")
    _emit(render(matrix, args.format), args.output)
    return _exit_code(False)


COMMANDS = {"report": command_report, "diff": command_diff, "matrix": command_matrix}
