"""The reporting subcommands of `python -m conformance` (registered by conformance.cli).

    report DIR... [--out DIR] [--format all|terminal|markdown|html|junit|jsonl] [--output FILE]
           [--shrink [--shrink-budget S]]
    diff OLD NEW [--drift X] [--format terminal|markdown] [--output FILE]
    matrix DIR... [--drift X] [--format terminal|markdown|html] [--output FILE]

`report` with the default format `all` (re)writes summary.md, report.html and
junit.xml into DIR and prints the terminal report; a single format is printed
(or written to --output) and nothing else is touched.  Several run folders (the
shards of `run --shard K/N`), or a folder holding them, are one run
(conformance.reporting.merge): `report` writes the merged run into --out; OLD and NEW
of `diff` may each be such a folder.  `diff` exits 1 iff some id regressed; a merge
that would be wrong (a shard missing, a case twice with different verdicts, folders
of other revisions, tiers, backends or Triton versions) is reported and exits 1.
Bad arguments exit 2 (conformance.usage.UsageError).
"""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.reporting.diff import DEFAULT_DRIFT
from conformance.running.results import RESULTS_FILE, results_file
from conformance.usage import EXIT_FAILED, EXIT_OK, UsageError

REPORT_FORMATS = ("all", "terminal", "markdown", "html", "junit", "jsonl")


def add_parsers(commands) -> None:
    """Add `report`, `diff` and `matrix` to the CLI's subparsers."""
    report = commands.add_parser("report", help="render a run folder's reports from its results")
    report.add_argument("run_dirs", nargs="+", metavar="DIR",
                        help="a run folder; several (or a folder holding them) are merged into --out")
    report.add_argument("--out", metavar="DIR", help="where a merged run (results.jsonl, env.json, reports) goes")
    report.add_argument("--format", default="all", choices=REPORT_FORMATS,
                        help="all (default): write summary.md, report.html, junit.xml into DIR and print the table")
    report.add_argument("--output", metavar="FILE", help="write a single format here instead of stdout")
    report.add_argument("--shrink", action="store_true",
                        help="first find the smallest failing case of every failing case (re-runs them with the "
                             "run's backend and kernels; DIR/shrunk.jsonl)")
    report.add_argument("--shrink-budget", type=float, default=120.0, metavar="S",
                        help="seconds per failing case for --shrink (default 120)")

    compare = commands.add_parser("diff", help="regressions, fixes, new/removed ids and ratio drift between runs")
    compare.add_argument("old", metavar="OLD", help="run folder of the baseline (or a folder of shards)")
    compare.add_argument("new", metavar="NEW", help="run folder to judge (or a folder of shards)")
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


def _emit(text: str, output: str | None) -> None:
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def _merged(paths: list[str], argument: str):
    from conformance.reporting.merge import merge

    try:
        merged = merge(paths)
    except ValueError as exc:
        raise _usage_error(f"argument {argument}: {exc}") from None
    for problem in merged.problems:
        print(f"conformance: merge: {problem}", file=sys.stderr)
    return merged


def command_report(args) -> int:
    from conformance.reporting.report import render, render_run, write_run

    from conformance.reporting.merge import run_folders

    if not run_folders(args.run_dirs):
        raise _usage_error(f"argument DIR: no {RESULTS_FILE} in or below {', '.join(args.run_dirs)}")
    if len(args.run_dirs) == 1 and results_file(args.run_dirs[0]) and not args.out:
        run_dir, problems = Path(args.run_dirs[0]), []
    else:
        if not args.out:
            raise _usage_error("argument --out: several run folders merge into a new folder: name it with --out")
        merged = _merged(args.run_dirs, "DIR")
        run_dir, problems = write_run(args.out, merged.env, merged.lines), merged.problems
    if args.shrink:
        from conformance.diagnosing.shrink_command import shrink_run

        shrink_run(run_dir, args.shrink_budget)
    if args.format == "all":
        if args.output:
            raise _usage_error("argument --output: needs a single --format")
        sys.stdout.write(render_run(run_dir))
    else:
        _emit(render(run_dir, args.format), args.output)
    return _exit_code(bool(problems))


def command_diff(args) -> int:
    from conformance.reporting import diff

    old, new = _merged([args.old], "OLD"), _merged([args.new], "NEW")
    changes = diff.compare(old.lines, new.lines, args.drift)
    _emit(diff.render(old.env, new.env, changes, args.format, args.drift), args.output)
    return _exit_code(diff.has_regression(changes) or bool(old.problems or new.problems))


def command_matrix(args) -> int:
    from conformance.reporting.matrix import load_matrix, render

    matrix = load_matrix(args.dirs, args.drift)
    if not matrix.columns:
        raise _usage_error(f"argument DIR: no {RESULTS_FILE} in or below {', '.join(args.dirs)}")
    _emit(render(matrix, args.format), args.output)
    return _exit_code(False)


COMMANDS = {"report": command_report, "diff": command_diff, "matrix": command_matrix}
