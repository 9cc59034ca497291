"""Which split-kernel configuration and split count read a KV cache fastest (GPU only).

For each cell of the decoding benchmark's grid named on the command line (or the default: the
cells past 256 MB that read below 80 % of the copy bandwidth in the benchmark), times
kv_cache_attention unchecked under every (BLOCK_N, num_warps, num_stages) of the probe's grid
(kernels.tuning.OVERRIDES["decode_split"]; BLOCK_M stays the plan's row tile) and every split
count (0: the heuristic), all interleaved per cell (benchmarks.timing), and any peers of the
decoding benchmark named by --peers (e.g. flag_paged, with FlagAttention's src on PYTHONPATH)
in the same rounds, each timed as the benchmark's --timing says (graph, the default: calls
replayed from a CUDA graph over the cell's rotating cache copies; eager: Python calls).  Prints
the best per cell and the heuristic's share of it; JSON lines with --out, each with the
kernels a call ran and their device time (timing.kernel_times) under --profile.  A cell is
dtype:page:seq_q:batch:context[:head_dim] (head dim 128 if left out).  Several cells are
probed one child process each (supervise): a CUDA error such as an illegal memory access
poisons the process it happens in, and graph captures of several implementations in one
process have met one (reports/h100-sm90/kv-cache/graph-illegal-access/); a child that dies
leaves its cell's line in --out as an error, and the next cell runs in a fresh process.

    python benchmarks/decode_probe.py [--cells bf16:16:1:1:131072,...] [--splits 0,16,...]
                                      [--peers flag_paged] [--configs 64x4x2,...] [--timing eager]
                                      [--profile] [--out FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from conformance.backends import activate  # noqa: E402

activate()

import torch  # noqa: E402

from conformance.bundled.benchmarks import decode, timing  # noqa: E402
from conformance.bundled.kernels import tuning  # noqa: E402
from conformance.bundled.kernels.launch_tables import LaunchConfig  # noqa: E402

DEFAULT_CELLS = [decode.Cell("bf16", page, seq_q, batch, context)
                 for page in (16, 64) for seq_q in (1, 4)
                 for batch, context in ((1, 131072), (8, 16384), (8, 131072), (32, 4096), (128, 1024))]
CONFIGS = [LaunchConfig(16, block_n, num_warps=warps, num_stages=stages)
           for block_n, warps, stages in itertools.product((32, 64, 128), (4, 8), (2, 3, 4))]
SPLITS = (0, 16, 32, 64, 128)
POLICY = timing.RepetitionPolicy(target_ms=30.0, min_reps=5, max_reps=40, warmup_ms=10.0, rounds=1)


def parse_cell(text: str) -> decode.Cell:
    dtype, *numbers = text.split(":")
    page, seq_q, batch, context, *head_dim = map(int, numbers)
    return decode.Cell(dtype, page, seq_q, batch, context, head_dim=head_dim[0] if head_dim else 128)


def parse_config(text: str) -> LaunchConfig:
    block_n, warps, stages = map(int, text.split("x"))
    return LaunchConfig(16, block_n, num_warps=warps, num_stages=stages)


def probe(cell: decode.Cell, splits=SPLITS, peers=(), configs=CONFIGS, timing_mode="graph",
          profiled=False) -> list[dict]:
    problems = [decode.problem(cell, seed=seed) for seed in range(decode.copies_for(cell))]

    def timed(build):
        """What one sample runs: `build(tensors)`'s call over every copy (decode._timed_callable)."""
        return decode._timed_callable([build(tensors) for tensors in problems], timing_mode)

    def call(config, count, tensors):
        """The benchmark's unchecked bundled call in `count` splits, under `config` (None: the table's)."""
        bundled = decode._bundled(cell, tensors, check_values=False, num_splits=count)
        if config is None:
            return bundled

        def run():
            tuning.OVERRIDES["decode_split"] = config
            try:
                return bundled()
            finally:
                tuning.OVERRIDES.pop("decode_split", None)
        return run

    calls = {"table/0": timed(lambda tensors: call(None, 0, tensors))}
    for config, count in itertools.product(configs, splits):
        calls[f"{config.block_n}x{config.num_warps}w{config.num_stages}s/{count}"] = timed(
            lambda tensors: call(config, count, tensors))
    for peer in peers:
        reason = decode.skip_reason(cell, peer, torch.cuda.mem_get_info()[0], timing_mode=timing_mode)
        if reason is None:
            calls[peer] = timed(lambda tensors: decode._BUILDERS[peer](cell, tensors))
    per_sample = decode.calls_per_sample(len(problems), timing_mode)
    lines = []
    for name, result in timing.interleaved_medians(calls, POLICY).items():
        line = {"cell": cell.label, "variant": name, "cache_bytes": cell.cache_bytes,
                **decode.timed_fields(cell, result, per_sample)}
        if profiled and "ms" in line:  # per decode call: launches, and median microseconds a launch
            line["kernels"] = {kernel: [count / per_sample, microseconds] for kernel, (count, microseconds)
                               in timing.kernel_times(calls[name]).items()}
        lines.append(line)
    return lines  # the cell's tensors go with the calls that hold them


def cell_text(cell: decode.Cell) -> str:
    """`cell` as --cells names it (parse_cell's inverse)."""
    return f"{cell.dtype}:{cell.page_size}:{cell.seq_q}:{cell.batch}:{cell.context}:{cell.head_dim}"


def child_arguments(args, cell: decode.Cell) -> list[str]:
    """The command-line arguments that probe `cell` alone as `args` would."""
    return ["--splits", args.splits, "--peers", args.peers, "--timing", args.timing, "--cells", cell_text(cell),
            *(["--configs", args.configs] if args.configs else []), *(["--profile"] if args.profile else []),
            *(["--out", str(args.out)] if args.out else [])]


def run_child(arguments: list[str]) -> subprocess.CompletedProcess:
    """This script in a child process (decode.run_script)."""
    return decode.run_script(pathlib.Path(__file__).resolve(), arguments)


def supervise(args, cells: list, run=run_child) -> int:
    """Probe each of `cells` in a child process of its own; where one dies, say so and record
    its cell as an error line in --out (its variants' lines are written only once the cell is
    done, so a dead child left none)."""
    for cell in cells:
        child = run(child_arguments(args, cell))
        if child.returncode == 0:
            continue
        error = f"the probing process died (exit {child.returncode}): {decode.last_words(child.stderr)}"
        print(f"{cell.label:34s} {error}", flush=True)
        if args.out:
            with args.out.open("a") as sink:
                sink.write(json.dumps({"cell": cell.label, "error": error}) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", help="comma-separated dtype:page:seq_q:batch:context (default: the slow cells)")
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)),
                        help="comma-separated split counts to try (0: the heuristic)")
    parser.add_argument("--peers", default="", help=f"comma-separated peers of the benchmark ({', '.join(decode.PEERS)})")
    parser.add_argument("--configs", help="comma-separated BLOCK_Nxwarpsxstages (default: the probe's grid)")
    parser.add_argument("--timing", choices=decode.TIMINGS, default="graph", help="as the benchmark's --timing")
    parser.add_argument("--profile", action="store_true",
                        help="also record each variant's kernels and their device time (torch.profiler)")
    parser.add_argument("--out", type=pathlib.Path, help="JSON lines, one per (cell, variant)")
    args = parser.parse_args(argv)
    cells = [parse_cell(text) for text in args.cells.split(",")] if args.cells else DEFAULT_CELLS
    if len(cells) > 1:
        return supervise(args, cells)
    (cell,) = cells
    splits = tuple(int(count) for count in args.splits.split(","))
    peers = tuple(name for name in args.peers.split(",") if name)
    copy = decode.copy_bandwidth(decode.POLICY)
    print(f"copy bandwidth {copy / 1e9:.0f} GB/s", flush=True)
    configs = [parse_config(text) for text in args.configs.split(",")] if args.configs else CONFIGS
    lines = probe(cell, splits, peers, configs, args.timing, args.profile)
    if args.out:
        with args.out.open("a") as sink:
            sink.writelines(json.dumps({**line, "copy_bandwidth": copy}) + "\n" for line in lines)
    timed = sorted((line for line in lines if "ms" in line), key=lambda line: line["ms"])
    if not timed:
        # A CUDA error is sticky: one implementation's illegal access fails every later call of the process.
        print(f"{cell.label:34s} every variant failed: {lines[0].get('error', '')[:120]}", flush=True)
        return 0
    table = next(line for line in lines if line["variant"] == "table/0")
    best = timed[0]
    print(f"{cell.label:34s} table {table.get('bandwidth', 0) / copy:5.0%}  best {best['variant']:16s} "
          f"{best['bandwidth'] / copy:5.0%}  next " + ", ".join(
              f"{line['variant']} {line['bandwidth'] / copy:.0%}" for line in timed[1:5]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
