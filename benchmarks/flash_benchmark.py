"""TFLOP/s and peak memory of the bundled flash_attention next to torch SDPA's backends.

    python benchmarks/flash_benchmark.py [--quick] [--out DIR] [--impls bundled,sdpa-flash,...]
                                         [--seq-lens 1024,...] [--head-dims 64,128] [--dtypes fp16,bf16]
    python benchmarks/flash_benchmark.py --render DIR     # re-render DIR's report (no GPU)

Writes DIR (default reports/runs/<UTC time>-benchmark): env.json (the conformance
environment fingerprint plus the benchmark's method), benchmark.jsonl (one line per
implementation x direction x problem, written as measured), benchmark.md (tables)
and the plot of TFLOP/s against S (benchmark.svg).
Needs a CUDA (or ROCm) GPU; repetitions are bounded so the full grid fits in a few minutes.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (never on -m, where it
# already is, nor in an installed copy, whose parent folder holds the bundled code itself).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.bundled.benchmarks import grid, harness_throughput, implementations, report  # noqa: E402

EXIT_NO_GPU = EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke check: S {grid.QUICK['seq_lens']}, D {grid.QUICK['head_dims']}, "
                             f"{'/'.join(grid.QUICK['dtypes'])}, few repetitions")
    parser.add_argument("--out", type=pathlib.Path, help="report folder (default reports/runs/<time>-benchmark)")
    parser.add_argument("--render", type=pathlib.Path, metavar="DIR",
                        help="only re-render DIR/benchmark.md and the plot from DIR/benchmark.jsonl")
    parser.add_argument("--harness-run", type=pathlib.Path, metavar="RUN",
                        help="a conformance run folder (e.g. of the standard tier on this machine) whose "
                             "cases, wall time and cases per second the report shows as the harness's throughput")
    parser.add_argument("--impls", default=",".join(implementations.NAMES),
                        help=f"comma-separated subset of {','.join(implementations.NAMES)}")
    parser.add_argument("--seq-lens", help="comma-separated S values (default: the grid's)")
    parser.add_argument("--head-dims", help="comma-separated D values (default: the grid's)")
    parser.add_argument("--dtypes", help="comma-separated dtypes among fp16,bf16 (default: the grid's)")
    return parser


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = set(args.impls.split(",")) - set(implementations.NAMES)
    if unknown:
        parser.error(f"--impls: unknown {sorted(unknown)}; known: {', '.join(implementations.NAMES)}")
    return args


def grid_of(args, full: dict = grid.FULL, quick: dict = grid.QUICK) -> dict:
    """The grid to measure: `quick` or `full`, with --seq-lens, --head-dims and --dtypes applied."""
    chosen = dict(quick if args.quick else full)
    for key, text, convert in (("seq_lens", args.seq_lens, int), ("head_dims", args.head_dims, int),
                               ("dtypes", args.dtypes, str)):
        if text:
            chosen[key] = tuple(convert(item) for item in text.split(","))
    return chosen


def _store_harness_throughput(benchmark_dir: pathlib.Path, run_dir: pathlib.Path) -> bool:
    try:
        harness_throughput.store(benchmark_dir, harness_throughput.summarise(run_dir))
    except FileNotFoundError as exc:
        print(f"benchmark: {exc}", file=sys.stderr)
        return False
    return True


def default_out_dir(kind: str = "benchmark") -> pathlib.Path:
    now = datetime.datetime.now(datetime.timezone.utc)
    return ROOT / "reports" / "runs" / f"{now:%Y%m%d-%H%M%S}-{kind}"


def gpu_missing(command: str = "benchmark") -> bool:
    """True, with the message on stderr, where torch sees no GPU (nothing can be measured)."""
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{command}: needs a GPU, and torch sees none (torch.cuda.is_available() is False); "
          "nothing was measured. On a machine without a GPU, `--render DIR` re-renders a recorded run.",
          file=sys.stderr)
    return True


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        if not (args.render / report.BENCHMARK_FILE).exists():
            print(f"benchmark: no {report.BENCHMARK_FILE} in {args.render}", file=sys.stderr)
            return EXIT_USAGE
        if args.harness_run and not _store_harness_throughput(args.render, args.harness_run):
            return EXIT_USAGE
        written = report.write_report(args.render)
        print("\n".join(str(path) for path in written))
        return 0
    if gpu_missing():
        return EXIT_NO_GPU
    from conformance.bundled.benchmarks.run import run_benchmark

    out = args.out or default_out_dir()
    run_benchmark(out, grid.problems(**grid_of(args)), args.impls.split(","), quick=args.quick)
    if args.harness_run and not _store_harness_throughput(out, args.harness_run):
        return EXIT_USAGE
    written = report.write_report(out)
    print(report.terminal_table(*report.read_run(out)))
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
