"""KV-cache decoding: bundled kv_cache_attention against FlagAttention and FlexAttention, in bytes per second.

    python benchmarks/decode_benchmark.py [--quick] [--out DIR] [--impls bundled,flag_paged,...]
                                          [--timing graph|eager] [--flag-attention DIR]
    python benchmarks/decode_benchmark.py --render DIR     # re-render DIR's report (no GPU)

What is measured and how: benchmarks/decode.py. Writes DIR (default
reports/runs/<UTC time>-decode): env.json (with the copy bandwidth before and after the grid),
benchmark.jsonl (one line per implementation and cell, written as measured), benchmark.md (per
panel a table of GB/s and share of the copy bandwidth, the goals of issue 34 checked cell by
cell) and benchmark.svg (bandwidth against context length). Needs a CUDA (or ROCm) GPU.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (as flash_benchmark.py does).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conformance.bundled.benchmarks import flash_benchmark, svg  # noqa: E402
from conformance.reporting.markdown import table as markdown_table  # noqa: E402
from conformance.running.results import read_env, read_json_lines  # noqa: E402

EXIT_NO_GPU = EXIT_USAGE = flash_benchmark.EXIT_NO_GPU
BENCHMARK_FILE, MARKDOWN_FILE, PLOT_FILE = "benchmark.jsonl", "benchmark.md", "benchmark.svg"
COLORS = {"bundled": "#d62728", "bundled_unchecked": "#8c564b", "bundled_contiguous": "#e377c2",
          "flag_paged": "#2ca02c", "flag_split_kv": "#9467bd",
          "flex": "#ff7f0e"}
TIMING_TEXT = {
    "graph": "each implementation's calls replayed from a CUDA graph (its kernels' own time, as a serving "
             "loop replays a decode step); small caches read as several copies in turn, so reads come from HBM.",
    "eager": "each Python call between CUDA events (host work counted where the GPU outruns it)."}
BATCH_DASHES = {"B1": "2 3", "B8": "", "B32": "6 4", "B128": "10 3 2 3"}


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    from conformance.bundled.benchmarks import decode

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"a small grid: {decode.QUICK}")
    parser.add_argument("--out", type=pathlib.Path, metavar="DIR", help="run folder (default reports/runs/<time>-decode)")
    parser.add_argument("--dtypes", metavar="LIST", help="comma-separated: only these of the grid's dtypes")
    parser.add_argument("--impls", default=",".join(decode.IMPLEMENTATIONS), metavar="LIST",
                        help=f"comma-separated, of {', '.join(decode.IMPLEMENTATIONS)}")
    parser.add_argument("--timing", choices=decode.TIMINGS, default="graph",
                        help=" ".join(f"{mode}{' (default)' if mode == 'graph' else ''}: {text}"
                                      for mode, text in TIMING_TEXT.items()) + " One per run folder.")
    parser.add_argument("--flag-attention", type=pathlib.Path, metavar="DIR",
                        help="a folder holding FlagAttention's `flag_attn` package (e.g. a clone's src/)")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="start no cell after this many seconds; run again on the same --out to go on "
                             "(cells already in its benchmark.jsonl are skipped)")
    parser.add_argument("--render", type=pathlib.Path, metavar="DIR", help="re-render DIR's report and exit")
    # How the supervising process runs the grid (`supervise`); not for users.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", metavar="CELL", help=argparse.SUPPRESS)
    return parser


def parse_args(argv):
    from conformance.bundled.benchmarks import decode

    parser = build_parser()
    args = parser.parse_args(argv)
    unknown = sorted(set(args.impls.split(",")) - set(decode.IMPLEMENTATIONS))
    if unknown:
        parser.error(f"argument --impls: unknown implementation {unknown[0]!r} (known: {', '.join(decode.IMPLEMENTATIONS)})")
    return args


# --------------------------------------------------------------------------- the report

def _panels(lines: list[dict]) -> dict:
    """(dtype, page size, Sq) -> its lines; a dense peer's line (measured at one page size) in
    every page size's panel, beside the bundled kernel it is compared with."""
    from conformance.bundled.benchmarks.decode import CONTIGUOUS

    page_sizes = sorted({line["page_size"] for line in lines if line["impl"] not in CONTIGUOUS}
                        or {line["page_size"] for line in lines})
    panels = {}
    for line in lines:
        shown_at = page_sizes if line["impl"] in CONTIGUOUS else [line["page_size"]]
        for page in shown_at:
            panels.setdefault((line["dtype"], page, line["seq_q"]), []).append(line)
    return panels


def _copy(env: dict) -> float | None:
    readings = env.get("benchmark", {}).get("copy_bandwidth") or []
    return max(readings) if readings else None


def _cell_text(line: dict | None, copy: float | None) -> str:
    if line is None:
        return ""
    if "bandwidth" in line:
        share = f" ({line['bandwidth'] / copy:.0%})" if copy else ""
        return f"{line['bandwidth'] / 1e9:.0f}{share}"
    return "skip" if "skip" in line else "error"


def panel_table(lines: list[dict], copy: float | None) -> tuple[list[str], list[list]]:
    """Rows (batch, context) of GB/s (share of the copy bandwidth) per implementation."""
    names = [name for name in COLORS if any(line["impl"] == name for line in lines)]
    by_cell = {}
    for line in lines:
        by_cell.setdefault((line["batch"], line["context"]), {})[line["impl"]] = line
    rows = [[batch, context, f"{lines_of[next(iter(lines_of))]['cache_bytes'] / 2**20:.0f}",
             *(_cell_text(lines_of.get(name), copy) for name in names)]
            for (batch, context), lines_of in sorted(by_cell.items())]
    return ["B", "context", "cache MiB", *names], rows


def goals(lines: list[dict], copy: float | None) -> list[str]:
    """Issue 34's goals, cell by cell, for each bundled variant measured: >= 80 % of the copy
    bandwidth past 256 MB read, and >= 1.0x each peer measured on the same cell."""
    from conformance.bundled.benchmarks.decode import BUNDLED, COMPARED, COPY_SHARE_GOAL, LARGE_READ_BYTES, comparison_key

    text = []
    for variant in BUNDLED:
        ours_lines = [l for l in lines if l["impl"] == variant and "bandwidth" in l]
        if not ours_lines:
            continue
        large = [l for l in ours_lines if l["cache_bytes"] > LARGE_READ_BYTES]
        met = [l for l in large if copy and l["bandwidth"] >= COPY_SHARE_GOAL * copy]
        text.append(f"- {variant} >= {COPY_SHARE_GOAL:.0%} of the copy bandwidth where the cache read exceeds 256 MB: "
                    f"{len(met)} of {len(large)} cells" + ("" if copy else " (no copy bandwidth recorded)"))
        for peer in COMPARED[variant]:
            theirs_by_key = {comparison_key(l): l for l in lines if l["impl"] == peer and "bandwidth" in l}
            pairs = [(ours, theirs_by_key[key]) for ours in ours_lines
                     for key in [comparison_key({**ours, "impl": peer})] if key in theirs_by_key]
            if pairs:
                ratios = sorted(ours["bandwidth"] / theirs["bandwidth"] for ours, theirs in pairs)
                wins = sum(ratio >= 1.0 for ratio in ratios)
                text.append(f"- {variant} >= 1.0x {peer}: {wins} of {len(pairs)} cells "
                            f"(ratio {ratios[0]:.2f}-{ratios[-1]:.2f})")
            else:
                text.append(f"- {variant} >= 1.0x {peer}: not measured")
    return text


def markdown(env: dict, lines: list[dict]) -> str:
    copy = _copy(env)
    readings = env.get("benchmark", {}).get("copy_bandwidth") or []
    timing_mode = env.get("benchmark", {}).get("timing_mode", "eager")
    parts = ["# KV-cache decoding benchmark", "",
             f"Device: {env.get('device', '?')}; torch {env.get('torch', '?')}, triton {env.get('triton', '?')}; "
             f"harness {env.get('harness', {}).get('revision', '?') if isinstance(env.get('harness'), dict) else env.get('harness', '?')}.",
             "", "Copy bandwidth (device-to-device, read + written): "
             + (", ".join(f"{r / 1e9:.0f} GB/s" for r in readings) or "not measured")
             + "; cells show GB/s of K and V read (share of the best copy reading).", "",
             f"Timing: {timing_mode} -- {TIMING_TEXT[timing_mode]}", "",
             "## Goals", "", *goals(lines, copy), "", f"![bandwidth against context]({PLOT_FILE})", ""]
    for (dtype, page, seq_q), panel in sorted(_panels(lines).items()):
        header, rows = panel_table(panel, copy)
        parts += [f"## {dtype}, pages of {page}, Sq {seq_q}", "", markdown_table(header, rows), ""]
    problems = [f"- {l['impl']} {l['dtype']} page{l['page_size']} Sq{l['seq_q']} B{l['batch']} ctx{l['context']}: "
                f"{l.get('skip') or l.get('error')}" for l in lines if "bandwidth" not in l]
    if problems:
        parts += ["## Not measured", "", *problems, ""]
    return "\n".join(parts)


def plot(lines: list[dict]) -> str:
    panels = []
    for (dtype, page, seq_q), panel in sorted(_panels(lines).items()):
        series = {}
        for line in sorted(panel, key=lambda l: l["context"]):
            if "bandwidth" in line:
                series.setdefault((line["impl"], f"B{line['batch']}"), []).append(
                    (line["context"], line["bandwidth"] / 1e9))
        panels.append((f"{dtype}, pages of {page}, Sq {seq_q}", series))
    dashes = {label: dash for label, dash in BATCH_DASHES.items()
              if any(label == variant for _, series in panels for (_, variant) in series)}
    return svg.line_panels(panels, COLORS, dashes, "context (keys)", "GB/s of K and V read",
                           "KV-cache decoding: bandwidth against context length")


def write_report(run_dir: pathlib.Path) -> list[pathlib.Path]:
    env, lines = read_env(run_dir), read_json_lines(run_dir / BENCHMARK_FILE)
    (run_dir / MARKDOWN_FILE).write_text(markdown(env, lines))
    (run_dir / PLOT_FILE).write_text(plot(lines))
    return [run_dir / MARKDOWN_FILE, run_dir / PLOT_FILE]


# --------------------------------------------------------------------------- the run

def _measured(out: pathlib.Path) -> set[tuple[str, str]]:
    """(cell label, implementation) of every line out/benchmark.jsonl already holds."""
    from conformance.bundled.benchmarks import decode

    path = out / BENCHMARK_FILE
    fields = ("dtype", "page_size", "seq_q", "batch", "context")
    return {(decode.Cell(*(line[f] for f in fields)).label, line["impl"])
            for line in read_json_lines(path)} if path.exists() else set()


def _missing(out: pathlib.Path, cell_list, names) -> list[tuple]:
    """(cell, the implementations it still lacks) for each cell not finished (a resumed run's work)."""
    from conformance.bundled.benchmarks import decode

    done = _measured(out)
    todo = [(cell, [name for name in decode.measured_on(cell, names, cell_list[0].page_size)
                    if (cell.label, name) not in done]) for cell in cell_list]
    return [(cell, lacking) for cell, lacking in todo if lacking]


def run_decode(out: pathlib.Path, cell_list, names, quick: bool, budget_s: float | None = None,
               only: str | None = None, timing_mode: str = "graph") -> pathlib.Path:
    """Measure every cell not yet in out/benchmark.jsonl into it (written as measured), until
    `budget_s` seconds have passed (the rest is left for a later run on the same folder), or only
    the cell labelled `only` (`supervise`, after a crash); env.json keeps every copy bandwidth
    reading, before and after each run."""
    from conformance.bundled.benchmarks import decode, run

    out.mkdir(parents=True, exist_ok=True)
    policy = decode.POLICY
    earlier_method = read_env(out).get("benchmark", {}) if (out / "env.json").exists() else {}
    if earlier_method and earlier_method.get("timing_mode", "eager") != timing_mode:
        raise SystemExit(f"decode benchmark: {out} holds a run timed {earlier_method.get('timing_mode', 'eager')!r}; "
                         f"--timing {timing_mode} needs another --out")
    earlier = earlier_method.get("copy_bandwidth", [])
    copies = [*earlier, decode.copy_bandwidth(policy)]
    method = {"bandwidth": "K and V bytes of every context / median time (benchmarks/decode.py)",
              "copy_bandwidth": copies, "timing_mode": timing_mode,
              "cache_copies": f"caches under {decode.ROTATION_BYTES >> 20} MiB read as up to {decode.MAX_COPIES} "
                              "copies in turn (benchmarks/decode.py: copies_for)",
              "dense_peers": f"{', '.join(decode.CONTIGUOUS)} measured at pages of {cell_list[0].page_size} "
                             "only (they read a contiguous copy), compared with every page size"}
    measured = {name: name for name in names}
    run.write_environment(out, quick, policy, measured, method)
    started = time.monotonic()
    todo = [(cell, lacking) for cell, lacking in _missing(out, cell_list, names) if only in (None, cell.label)]
    note = {"note": "measured alone: the grid's process died in this cell"} if only else {}
    with open(out / BENCHMARK_FILE, "a") as results:
        for index, (cell, lacking) in enumerate(todo):
            if budget_s is not None and time.monotonic() - started > budget_s:
                # A child of supervise() gets what was left of the run's --budget when it started.
                print(f"time budget spent (this process's share: {budget_s:.0f} s): {len(todo) - index} cells left "
                      "for a resumed run (the same command, the same --out)", flush=True)
                break
            for line in decode.measure_cell(cell, lacking, policy, timing_mode):
                results.write(json.dumps({**line, **note}) + "\n")
                results.flush()
            print(f"[{time.monotonic() - started:6.0f} s] {cell.label}", flush=True)
    copies.append(decode.copy_bandwidth(policy))
    run.write_environment(out, quick, policy, measured, method)
    return out


def _worker(args, out: pathlib.Path, names: list[str], budget_s: float | None = None) -> subprocess.CompletedProcess:
    """This script in a child process measuring into `out` (stdout passed through, stderr kept)."""
    from conformance.bundled.benchmarks.decode import run_script

    arguments = ["--worker", "--out", str(out), "--impls", ",".join(names),
                 *(["--quick"] if args.quick else []), *(["--only", args.only] if args.only else []),
                 *(["--dtypes", args.dtypes] if args.dtypes else []), "--timing", args.timing,
                 *(["--flag-attention", str(args.flag_attention)] if args.flag_attention else []),
                 *(["--budget", f"{budget_s:.0f}"] if budget_s is not None else [])]
    return run_script(pathlib.Path(__file__).resolve(), arguments)


def _record_command(out: pathlib.Path) -> None:
    """env.json's command: this supervising command, not the last child's (which wrote it)."""
    from conformance.running.environment import command_line
    from conformance.running.results import write_env

    if (out / "env.json").exists():
        env = read_env(out)
        env["command"] = command_line()
        write_env(out, env)


def supervise(args, out: pathlib.Path, cell_list, names: list[str]) -> None:
    """Run the grid in child processes, so that a crash is recorded and the grid goes on.

    An illegal memory access poisons the CUDA context of the process it happens in (every later
    call fails), and which implementation caused it is not known when the grid's calls take
    turns. So the grid runs in a child; where a child dies, the first cell it had not finished is
    measured again one implementation per child, the one whose child dies recorded as an error
    with its last words, and the grid resumes after that cell (every cell then has its lines,
    so the loop always advances)."""
    from dataclasses import asdict

    from conformance.bundled.benchmarks.decode import last_words

    started = time.monotonic()

    def budget_left():
        return None if args.budget is None else args.budget - (time.monotonic() - started)

    while True:
        child = _worker(args, out, names, budget_left())
        todo = _missing(out, cell_list, names)
        if child.returncode == 0 or not todo or (args.budget is not None and budget_left() <= 0):
            return
        cell, lacking = todo[0]
        print(f"the measuring process died (exit {child.returncode}) in {cell.label}: "
              "measuring it one implementation per process", flush=True)
        for name in lacking:
            alone = _worker(argparse.Namespace(**{**vars(args), "only": cell.label}), out, [name])
            if (cell.label, name) not in _measured(out):
                line = {"impl": name, **asdict(cell), "cache_bytes": cell.cache_bytes,
                        "error": f"the process died (exit {alone.returncode}) measuring it alone: {last_words(alone.stderr)}"}
                with open(out / BENCHMARK_FILE, "a") as results:
                    results.write(json.dumps(line) + "\n")


def main(argv=None) -> int:
    from conformance.bundled.benchmarks import decode

    args = parse_args(argv)
    if args.render:
        if not (args.render / BENCHMARK_FILE).exists():
            print(f"decode benchmark: no {BENCHMARK_FILE} in {args.render}", file=sys.stderr)
            return EXIT_USAGE
        print("\n".join(str(path) for path in write_report(args.render)))
        return 0
    if flash_benchmark.gpu_missing("decode benchmark"):
        return EXIT_NO_GPU
    out = args.out or flash_benchmark.default_out_dir("decode")
    grid = dict(decode.QUICK if args.quick else decode.FULL)
    if args.dtypes:
        grid["dtypes"] = tuple(dtype for dtype in grid["dtypes"] if dtype in args.dtypes.split(","))
    cell_list = decode.cells(**grid)
    if not args.worker:
        supervise(args, out, cell_list, args.impls.split(","))
        _record_command(out)
        print("\n".join(str(path) for path in write_report(out)))
        return 0
    if args.flag_attention:
        sys.path.insert(0, str(args.flag_attention.resolve()))
    run_decode(out, cell_list, args.impls.split(","), args.quick, args.budget, args.only, args.timing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
