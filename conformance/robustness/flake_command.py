"""`python -m conformance flake`: the flake set under many seeds (conformance.robustness.flake),
once per distribution with --distributions (conformance.robustness.flake_scales)."""

from __future__ import annotations

from pathlib import Path

from conformance import usage
from conformance.cases.catalog import Case
from conformance.cases.tiers import resolve_tier
from conformance.robustness import flake_scales
from conformance.robustness.flake import (DEFAULT_SEEDS, FLAKE_SETS, false_alarm, flake_cases, judged_lines,
                                          write_report)
from conformance.running import commands as run_commands
from conformance.running.results import RESULTS_FILE, default_run_dir, results_file


def add_parser(commands) -> None:
    from conformance.running import run_options

    flake = commands.add_parser("flake", help="false-alarm rate of the bundled kernels over many seeds")
    flake.add_argument("--tier", default="auto", choices=[*FLAKE_SETS, "auto"],
                       help="whose flake set (default: the backend's default tier)")
    flake.add_argument("--out", metavar="DIR", help="run folder (default reports/runs/<time>-flake-<backend>)")
    flake.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    flake.add_argument("--render", metavar="DIR", help="only re-render DIR/flake.md from DIR/results.jsonl "
                       "(or DIR/flake-scales.md from its distributions' folders)")
    flake.add_argument("--distributions", metavar="peers|SPEC,SPEC",
                       help="run the flake set once per distribution, into DIR/<distribution>/, and write "
                            "DIR/flake-scales.md (conformance/robustness/flake_scales.py)")
    run_options.add_arguments(flake)
    flake.set_defaults(seeds=DEFAULT_SEEDS)


def command_flake(args) -> int:
    """Run the flake set under the seeds, write flake.md; exit 1 iff any false alarm."""
    if args.render:
        if results_file(args.render):
            return _finish(args.render, usage.EXIT_OK)
        if flake_scales.run_folders(args.render):
            return _finish_scales(args.render, usage.EXIT_OK)
        raise usage.UsageError(f"argument --render: no {RESULTS_FILE} in {args.render} or its folders")
    profile = usage.backend_profile(args.backend, activate=True)
    tier = resolve_tier(args.tier, profile)
    try:
        base = flake_cases(tier)
    except ValueError as exc:
        raise usage.UsageError(f"argument --tier: {exc}") from None
    try:
        specs = flake_scales.distributions(args.distributions) if args.distributions is not None else None
    except ValueError as exc:
        raise usage.UsageError(f"argument {exc}") from None
    if specs and (args.distribution or args.resume):
        raise usage.UsageError("argument --distributions: not with --distribution or --resume")
    out = args.resume or args.out or str(default_run_dir(f"flake-{profile.key}"))
    if not specs:
        code = _run(args, base, out)
        return code if code == usage.EXIT_USAGE else _finish(out, code)
    codes = []
    for spec in specs:
        print(f"conformance flake: distribution {spec} ({len(codes) + 1} of {len(specs)})", flush=True)
        codes.append(_run(args, base, str(Path(out) / flake_scales.folder_name(spec)), spec))
        if codes[-1] == usage.EXIT_USAGE:
            return usage.EXIT_USAGE
        write_report(Path(out) / flake_scales.folder_name(spec))
    return _finish_scales(out, max(codes))


def _run(args, base: list[Case], out: str, distribution: str | None = None) -> int:
    """`run` of the flake set's cases under the seeds (and a distribution) into `out`."""
    run_args = dict(vars(args), tier="auto", case=[] if args.resume else [case.id for case in base],
                    kernel=[], capabilities=None, dropout_mask=[], op=[], out=out)
    if distribution is not None:
        run_args["distribution"] = distribution
    if args.resume:
        run_args.update(seeds=None, backend=None)
    return run_commands.command_run(type(args)(**run_args))


def _finish_scales(run_dir, run_code: int) -> int:
    """Write and print flake-scales.md; exit 1 iff a false alarm under any distribution."""
    path, text = flake_scales.write_report(run_dir)
    alarms = sum(false_alarm(line) for folder in flake_scales.run_folders(run_dir) for line in judged_lines(folder))
    print(f"\n{text}\nflake report: {path}")
    return usage.EXIT_FAILED if alarms or run_code else usage.EXIT_OK


def _finish(run_dir, run_code: int) -> int:
    """Write and print flake.md; exit 1 iff a false alarm (or the run failed otherwise)."""
    path, text, alarms = write_report(run_dir)
    print(f"\n{text}\nflake report: {path}")
    return usage.EXIT_FAILED if alarms or run_code else usage.EXIT_OK


COMMANDS = {"flake": command_flake}
