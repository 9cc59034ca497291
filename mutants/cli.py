"""`python -m mutants`: hunt the mutants with the conformance catalog, print and write the kill table.

    python -m mutants [--tier smoke|standard|full|auto] [--mutant NAME ...] [--out DIR]
                      [--max-kills N] [-j N] [--backend KEY] [--hunt-timeout S] [--list]

Exit codes: 0 every mutant killed (or its fault cannot show on this backend);
1 a mutant survived or no longer builds; 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from conformance import backends
from conformance.running.environment import fingerprint
from conformance.running.results import default_run_dir, write_env
from conformance.bundled.mutants.definitions import BY_NAME, COUNTED
from conformance.bundled.mutants.hunters import HUNT_TIMEOUT_S, hunt_all
from conformance.bundled.mutants.kill import TIER_LADDER, exit_status
from conformance.bundled.mutants.report import mutants_writer, kill_text, result_text, terminal, write_table

EXIT_USAGE = 2
GPU_JOBS = 4  # hunts at once on one GPU: they overlap kernel compilation, which is CPU-bound


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", default="auto", choices=[*TIER_LADDER, "auto"],
                        help="highest tier to climb to (default: the backend's default tier)")
    parser.add_argument("--mutant", action="append", default=[], metavar="NAME",
                        help="hunt only this mutant (repeatable; default: all counted mutants)")
    parser.add_argument("--out", metavar="DIR", help="folder for mutants.jsonl, mutants.md, env.json")
    parser.add_argument("--max-kills", type=int, default=0, metavar="N",
                        help="stop a hunt after N killing cases (default 0: every case of the tier that kills)")
    parser.add_argument("-j", "--jobs", type=int, metavar="N",
                        help=f"mutants hunted at once (default: CPU count on the interpreter, {GPU_JOBS} on a GPU)")
    parser.add_argument("--backend", metavar="KEY", help="interpreter or cuda:sm_XY (default: detected)")
    parser.add_argument("--shrink", type=float, default=0, metavar="S",
                        help="also shrink each mutant's first kill to the smallest case that still kills it, "
                             "S seconds each (default 0: off)")
    parser.add_argument("--hunt-timeout", type=float, default=HUNT_TIMEOUT_S, metavar="S",
                        help=f"seconds a hunt's process may run before it counts as hung and goes on with "
                             f"each case isolated (default {HUNT_TIMEOUT_S:g})")
    parser.add_argument("--list", action="store_true", help="list the mutants and their fault classes")
    return parser


def _mutant_names(requested: list[str]) -> list[str]:
    for name in requested:
        if name not in BY_NAME:
            raise ValueError(f"argument --mutant: unknown mutant {name!r} (known: {', '.join(BY_NAME)})")
        if not BY_NAME[name].counted:
            raise ValueError(f"argument --mutant: {name!r} is a robustness fixture, not hunted; judge it with "
                             f"python -m conformance run --kernel "
                             f"flash_attention=conformance.bundled.mutants.registry:flash_attention_{name}")
    return list(dict.fromkeys(requested)) or [mutant.name for mutant in COUNTED]


def _print_list() -> None:
    for mutant in BY_NAME.values():
        role = "" if mutant.counted else " [robustness fixture]"
        print(f"{mutant.name:30} {mutant.fault}{role}")


def _progress(total: int):
    started, finished = time.perf_counter(), []

    def report(line: dict) -> None:
        finished.append(line["mutant"])
        first = f" in {line['tier']} by {kill_text(line['kills'][0])}" if line["kills"] else ""
        print(f"[{len(finished)}/{total}] {time.perf_counter() - started:6.1f}s {line['mutant']}: "
              f"{result_text(line)}{first}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.list:
            _print_list()
            return 0
        names = _mutant_names(args.mutant)
        absent = backends.absence(backends.profile_by_key(args.backend)) if args.backend else None
        if absent:
            raise ValueError(f"argument --backend: {absent}")
        profile = backends.activate(args.backend)  # spawned hunters inherit TRITON_INTERPRET
    except ValueError as exc:
        print(f"mutants: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    tier = profile.default_tier if args.tier == "auto" else args.tier
    jobs = args.jobs or (os.cpu_count() or 1 if profile.interpreted else GPU_JOBS)
    out_dir = Path(args.out) if args.out else default_run_dir(f"mutants-{profile.key}")
    out_dir.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "mutants", *(sys.argv[1:] if argv is None else argv)])
    write_env(out_dir, fingerprint(profile, tier=tier, implementations={"mutants": ", ".join(names)},
                                   command=command))
    writer = mutants_writer(out_dir)
    report = _progress(len(names))

    def record(line: dict) -> None:
        writer.append(line)
        report(line)

    try:
        lines = hunt_all(names, tier, args.backend, args.max_kills, jobs, on_result=record, shrink_s=args.shrink,
                         hunt_timeout_s=args.hunt_timeout)
    finally:
        writer.close()
    print("\n" + terminal(lines))
    print(f"kill table: {write_table(out_dir)}")
    return exit_status(lines)
