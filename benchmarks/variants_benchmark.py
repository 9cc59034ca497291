"""Bundled attention variants (window, varlen, softcap, ALiBi) against FlexAttention and the dense kernel.

    python benchmarks/variants_benchmark.py [--quick] [--out DIR] [--seq-lens 8192,16384] [--head-dims 64,128]
                                            [--dtypes fp16,bf16] [--variants window,varlen,softcap,softcap_large,alibi]
                                            [--windows 1024,4096] [--flex-seq-lens 8192|none]
    python benchmarks/variants_benchmark.py --render DIR     # re-render DIR's report (no GPU)

What is measured and how FLOPs are counted: benchmarks/variants.py; the ratios and
targets: benchmarks/variants_report.py.  Built on the flash benchmark's pieces: its
shapes (grid.py), the interleaved timing and the results lines (run.py, timing.py), the
compiled FlexAttention (implementations.py), env.json and the report's tables and plot
(report.py).  Writes DIR (default reports/runs/<UTC time>-variants): env.json,
benchmark.jsonl (one line per implementation x direction x cell, written as measured),
benchmark.md and benchmark.svg.  Needs a CUDA (or ROCm) GPU.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (as flash_benchmark.py does).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.bundled.benchmarks import flash_benchmark, grid, report, variants, variants_report  # noqa: E402

EXIT_NO_GPU = EXIT_USAGE = flash_benchmark.EXIT_NO_GPU


def _listed(values) -> str:
    return ",".join(map(str, values))


def _minutes(plan: variants.Plan, quick: bool = False) -> str:
    return f"~{plan.estimate_s(quick) / 60:.1f} min"


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    quick, full, issue = (variants.Plan(**chosen) for chosen in (variants.QUICK, variants.FULL, variants.ISSUE))
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=f"GPU time on an H100 with cold compilation caches, estimated (benchmarks/variants.py, ESTIMATE): "
               f"--quick {_minutes(quick, True)}; the default grid {_minutes(full)} (bf16 only, 4 cells: "
               f"D 64/128 x S 8192/16384, FlexAttention in every cell); the issue's whole grid, "
               f"--dtypes fp16,bf16, {_minutes(issue)} (8 cells); --flex-seq-lens 8192 on the default grid "
               f"{_minutes(variants.Plan(**variants.FULL, flex_seq_lens=(8192,)))}.")
    parser.add_argument("--quick", action="store_true",
                        help=f"fast check: S {_listed(variants.QUICK['seq_lens'])}, "
                             f"D {_listed(variants.QUICK['head_dims'])}, "
                             f"{'/'.join(variants.QUICK['dtypes'])}, every variant and Flex, few repetitions "
                             f"({_minutes(quick, True)} on an H100, Flex's compilations included)")
    parser.add_argument("--out", type=pathlib.Path, help="report folder (default reports/runs/<time>-variants)")
    parser.add_argument("--render", type=pathlib.Path, metavar="DIR",
                        help="only re-render DIR/benchmark.md and the plot from DIR/benchmark.jsonl")
    parser.add_argument("--seq-lens", help=f"comma-separated S values (default {_listed(variants.FULL['seq_lens'])})")
    parser.add_argument("--head-dims", help=f"comma-separated D values (default {_listed(variants.FULL['head_dims'])})")
    parser.add_argument("--dtypes", help=f"comma-separated dtypes among fp16,bf16 (default bf16 only: "
                                         f"{_minutes(full)}; fp16,bf16 is the issue's grid, {_minutes(issue)})")
    parser.add_argument("--variants", default=",".join(variants.VARIANTS),
                        help=f"comma-separated subset of {','.join(variants.VARIANTS)} (the plain causal "
                             f"kernel, every ratio's baseline, is always measured)")
    parser.add_argument("--windows", default=",".join(map(str, variants.WINDOWS)),
                        help="comma-separated window lefts (right 0, causal)")
    parser.add_argument("--flex-seq-lens",
                        help="comma-separated S at which FlexAttention runs, or 'none' (default: every S); "
                             "each Flex variant compiles once per cell")
    parser.add_argument("--mutant", metavar="NAME",
                        help="time a mutant's kernels (python -m mutants --list) as the bundled ones: what a "
                             "faster but rejected implementation would gain, e.g. softcap_hardware_tanh")
    return parser


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(item) for item in text.split(",") if item)


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(variants.VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; known: {', '.join(variants.VARIANTS)}")
    from conformance.bundled.mutants.definitions import BY_NAME
    if args.mutant is not None and args.mutant not in BY_NAME:
        parser.error(f"--mutant: unknown {args.mutant!r}; known: {', '.join(BY_NAME)}")
    return args


def plan_of(args) -> variants.Plan:
    """The plan of the command line: the quick or default grid, with the options applied."""
    chosen = flash_benchmark.grid_of(args, full=variants.FULL, quick=variants.QUICK)
    flex = None if args.flex_seq_lens is None else () if args.flex_seq_lens == "none" else _ints(args.flex_seq_lens)
    return variants.Plan(seq_lens=chosen["seq_lens"], head_dims=chosen["head_dims"], dtypes=chosen["dtypes"],
                         variants=tuple(args.variants.split(",")), windows=_ints(args.windows), flex_seq_lens=flex,
                         mutant=args.mutant)


# ----------------------------------------------------------------------------- measuring (GPU)

def _cell_functions(plan: variants.Plan, problem: grid.Problem) -> tuple[list, dict, list[int]]:
    """(entries, name -> (lazy fn maker, its tensors), varlen lengths) of one cell.  The makers
    are cached, so the forward and the backward share one function (one Flex block mask and
    score_mod, which dynamo's guards see as the same), and run inside the measurement, so a
    maker that fails (e.g. out of memory) is that entry's error."""
    import torch

    from conformance.bundled.benchmarks import run

    entries = plan.entries(problem)
    dense = run.inputs(problem.shape, problem.dtype)
    slopes = torch.tensor(variants.alibi_slopes(problem.heads), dtype=torch.float32, device=run.DEVICE)
    lengths = variants.varlen_lengths(problem.seq_len, problem.batch * problem.seq_len)
    packed, offsets = (), None
    if any(entry.variant == "varlen" for entry in entries):
        packed = run.inputs((sum(lengths), problem.heads, problem.head_dim), problem.dtype, seed=1)
        offsets = variants.varlen_offsets(lengths, run.DEVICE)
    functions, makers, scaled = {}, {}, {}
    for entry in entries:
        # Entries calling the same function (softcap and softcap_large) share its maker: one
        # Flex compilation, one block mask.
        function = variants.Entry(entry.kernel, entry.function_variant, entry.param)
        if function not in makers:
            if entry.kernel == variants.FLEX:
                maker = functools.partial(variants.flex_function, function, problem.seq_len, run.DEVICE, slopes)
            else:
                maker = functools.partial(variants.bundled_function, function, slopes, offsets, max(lengths),
                                          plan.kernels_package)
            makers[function] = functools.cache(maker)
        functions[entry.name] = (makers[function], _entry_inputs(entry, dense, packed, scaled))
    return entries, functions, lengths


def _entry_inputs(entry: variants.Entry, dense: tuple, packed: tuple, scaled: dict) -> tuple:
    """(q, k, v) of an entry: the packed batch for varlen, else the cell's tensors with q
    times entry.q_factor (made once per factor in `scaled`; a leaf of its own)."""
    if entry.variant == "varlen":
        return packed
    if entry.q_factor == 1.0:
        return dense
    if entry.q_factor not in scaled:
        q, *rest = dense
        scaled[entry.q_factor] = ((q.detach() * entry.q_factor).requires_grad_(q.requires_grad), *rest)
    return scaled[entry.q_factor]


def _timed(maker, direction: str, tensors):
    """The timed callable of one entry (run.direction_call on the function `maker` makes)."""
    from conformance.bundled.benchmarks import run

    return run.direction_call(maker(), direction, *tensors, True)


def run_variants(out: pathlib.Path, plan: variants.Plan, quick: bool = False) -> pathlib.Path:
    """Measure every cell of the plan; returns benchmark.jsonl's path (lines written as measured)."""
    import torch

    from conformance.bundled.benchmarks import run
    from conformance.running.results import to_json

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    policy = run.QUICK_POLICY if quick else run.FULL_POLICY
    run.write_environment(
        out, quick, policy,
        implementations={"bundled": "kernels:flash_attention, kernels:flash_attention_varlen"
                         + (f" of mutant {plan.mutant} (mutants/definitions.py)" if plan.mutant else ""),
                         "flex": f"torch {torch.__version__} flex_attention, compiled"},
        method={"plan": plan.fields(), "estimate_s": round(plan.estimate_s(quick)),
                "flops": "matmul FLOPs over the visible (query, key) pairs only: 4·D·H per pair forward, "
                         "backward 2.5x (benchmarks/variants.py)"})
    path = out / report.BENCHMARK_FILE
    started = time.perf_counter()
    with open(path, "w", encoding="utf-8") as handle:
        for problem in plan.cells():
            entries, functions, lengths = _cell_functions(plan, problem)
            for direction in grid.DIRECTIONS:
                lines = {entry.name: variants.result_line(entry, problem, direction, lengths) for entry in entries}
                builders = {name: functools.partial(_timed, maker, direction, tensors)
                            for name, (maker, tensors) in functions.items()}
                measured = run.measure_calls(lines, builders, policy)
                for entry in entries:
                    line = {**measured[entry.name], "elapsed_s": round(time.perf_counter() - started, 1)}
                    handle.write(to_json(line) + "\n")
                    handle.flush()
                    print(run.progress(line, line["elapsed_s"]), flush=True)
            del functions
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        if not (args.render / report.BENCHMARK_FILE).exists():
            print(f"variants benchmark: no {report.BENCHMARK_FILE} in {args.render}", file=sys.stderr)
            return EXIT_USAGE
        print("\n".join(str(path) for path in variants_report.write_report(args.render)))
        return 0
    plan = plan_of(args)
    if flash_benchmark.gpu_missing("variants benchmark"):
        return EXIT_NO_GPU
    out = args.out or flash_benchmark.default_out_dir("variants")
    print(f"variants benchmark: {len(plan.cells())} cells, {_minutes(plan, args.quick)} estimated on an H100 "
          f"(cold caches); writing {out}", flush=True)
    run_variants(out, plan, quick=args.quick)
    written = variants_report.write_report(out)
    print(variants_report.terminal_summary(report.read_run(out)[1]))
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
