"""The harness's own speed, as a benchmark: cases per second of a tier, recorded so that
a regression shows in the numbers (`nox -s harness_speed`).

    python benchmarks/harness_speed.py [--tier auto] [--out DIR] [--label L] [-- RUN ARGS...]
    python benchmarks/harness_speed.py --out DIR --record RUN...   (finished run folders)

Runs `python -m conformance run --tier TIER --out DIR/<label>` (the backend's default
tier: smoke on the CPU interpreter, standard on a GPU; the arguments after `--` go to
`run`, e.g. `-- -n 1`), then appends one JSON line to DIR/harness_speed.jsonl --
tier, device, workers, cases, wall seconds, cases per second, Triton compilation
(cold/cached seconds) and the largest phases (conformance.phases), the run's exit code
(none for a recorded folder) -- and rewrites
DIR/harness_speed.md, one row per recorded run. The verdicts are not this script's
business: a failing case is timed like a passing one, and the run's own exit code is
recorded beside the figures.

Nothing here is a pass/fail threshold: speed goals are read off the table, not asserted.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from tabulate import tabulate  # noqa: E402

from conformance.bundled.benchmarks import harness_throughput  # noqa: E402
from conformance.reporting.time_breakdown import phase_totals  # noqa: E402
from conformance.running.results import read_env, read_results  # noqa: E402

RECORDS = "harness_speed.jsonl"
TABLE = "harness_speed.md"
HEADERS = ["label", "tier", "device", "revision", "workers", "cases", "wall s", "cases/s",
           "compile cold s", "compile cached s", "largest phases", "exit"]


def record(run_dir: pathlib.Path, label: str, exit_code: int | None) -> dict:
    """The figures of one finished run folder: its throughput as the benchmark report states it
    (harness_throughput.summarise: every case line, the run's wall time), with its workers,
    revision and phases (Triton compilation, the largest three)."""
    throughput = harness_throughput.summarise(run_dir)
    env = read_env(run_dir)
    _, phases = phase_totals(read_results(run_dir))
    largest = sorted(phases.items(), key=lambda item: -item[1])[:3]
    return {"label": label, "tier": throughput["tier"], "device": throughput["device"],
            "revision": (env.get("harness") or {}).get("revision"), "workers": (env.get("timing") or {}).get("workers"),
            "cases": throughput["cases"], "wall_s": throughput["wall_s"], "cases_per_s": throughput["cases_per_s"],
            "compile_cold_s": round(phases.get("compile_cold", 0.0), 2),
            "compile_cached_s": round(phases.get("compile_cached", 0.0), 2),
            "largest_phases": {name: round(seconds, 2) for name, seconds in largest}, "exit": exit_code}


def render(records: list[dict]) -> str:
    rows = [[r["label"], r["tier"], r["device"], (r["revision"] or "?")[:10], r["workers"], r["cases"],
             r["wall_s"], r["cases_per_s"], r["compile_cold_s"], r["compile_cached_s"],
             ", ".join(f"{name} {seconds:g} s" for name, seconds in r["largest_phases"].items()), r["exit"]]
            for r in records]
    return ("# Harness speed\n\nOne row per `benchmarks/harness_speed.py` run; phases are summed over "
            "the cases (worker seconds), wall time is the run's.\n\n"
            + tabulate(rows, headers=HEADERS, tablefmt="github", disable_numparse=True) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", default="auto", help="the tier to time (default: the backend's own)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("reports/runs/harness-speed"),
                        help="folder of the records (default reports/runs/harness-speed)")
    parser.add_argument("--label", help="this run's name in the table (default: the tier and worker option)")
    parser.add_argument("--record", nargs="+", type=pathlib.Path, metavar="RUN",
                        help="run nothing: record these finished run folders (labelled by folder name)")
    parser.add_argument("run_args", nargs="*", help="more arguments for `conformance run` (after --)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the run starts in the checkout's root
    if args.record:
        new = [record(run_dir, run_dir.name, exit_code=None) for run_dir in args.record]
    else:
        label = args.label or "-".join([args.tier, *args.run_args]).replace(" ", "") or args.tier
        run_dir = args.out / label
        command = [sys.executable, "-m", "conformance", "run", "--tier", args.tier, "--out", str(run_dir),
                   *args.run_args]
        print("harness_speed:", " ".join(command), flush=True)
        exit_code = subprocess.call(command, cwd=ROOT)
        if not (run_dir / "env.json").exists():
            print(f"harness_speed: the run wrote no report (exit {exit_code})", file=sys.stderr)
            return exit_code or 1
        new = [record(run_dir, label, exit_code)]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / RECORDS, "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(item) + "\n" for item in new)
    records = [json.loads(text) for text in (args.out / RECORDS).read_text(encoding="utf-8").splitlines() if text]
    (args.out / TABLE).write_text(render(records), encoding="utf-8")
    print(render(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
