"""The benchmark report, rendered from a run folder's benchmark.jsonl and env.json only.

benchmark.md: the environment, the method, the plot, and per (dtype, head dim, mask)
panel a table of TFLOP/s and one of peak memory (forward / backward per cell) with
every skip and error and its reason. The plot of TFLOP/s against S has one panel per
(dtype, head dim, mask) and one line per implementation and direction: benchmark.svg
(benchmarks/svg.py: no plotting dependency, the same file on every machine).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from conformance.bundled.benchmarks import harness_throughput, svg
from conformance.reporting import summary
from conformance.reporting.markdown import table as markdown_table
from conformance.running.results import read_env, read_json_lines

BENCHMARK_FILE, MARKDOWN_FILE = "benchmark.jsonl", "benchmark.md"
COLORS = {"bundled": "#d62728", "flex": "#ff7f0e", "sdpa-flash": "#1f77b4", "sdpa-cudnn": "#2ca02c",
          "sdpa-efficient": "#9467bd", "sdpa-math": "#7f7f7f"}
DIRECTION_NAMES = {"fwd": "forward", "bwd": "backward"}
DASHES = {"forward": "", "backward": "6 4"}  # SVG dash pattern of each direction's lines ("" = solid)
_ENV_KEYS = ("device", "driver", "cuda_runtime", "hip_runtime", "cudnn", "torch", "triton", "python", "harness",
             "time_utc", "command")
_PLOT_TITLE = "TFLOP/s against sequence length (solid: forward, dashed: backward)"


def read_run(run_dir) -> tuple[dict, list[dict]]:
    """(env.json, the lines of benchmark.jsonl) of a run folder; a torn last line is skipped."""
    return read_env(run_dir), read_json_lines(Path(run_dir) / BENCHMARK_FILE)


def panel_title(dtype: str, head_dim: int, causal: bool) -> str:
    return f"{dtype}, D={head_dim}, {'causal' if causal else 'non-causal'}"


def panels_of(lines: list[dict]) -> dict:
    """(dtype, head_dim, causal) -> its lines, in first-seen order."""
    panels = defaultdict(list)
    for line in lines:
        panels[(line["dtype"], line["head_dim"], line["causal"])].append(line)
    return panels


def _implementations(lines: list[dict]) -> list[str]:
    seen = list(dict.fromkeys(line["impl"] for line in lines))
    return [name for name in COLORS if name in seen] + [name for name in seen if name not in COLORS]


def _cell(by_direction: dict, value) -> str:
    """"fwd / bwd" of one implementation at one S; "-" where not measured."""
    parts = []
    for direction in DIRECTION_NAMES:
        line = by_direction.get(direction)
        parts.append(value(line) if line is not None and line["status"] == "ok" else "-")
    return " / ".join(parts)


def panel_tables(lines: list[dict]) -> tuple[list[str], list[list], list[list]]:
    """(headers, TFLOP/s rows, peak MiB rows) of one panel: implementations x S."""
    seq_lens = sorted({line["seq_len"] for line in lines})
    index = {(line["impl"], line["seq_len"], line["direction"]): line for line in lines}
    tflops_rows, memory_rows = [], []
    for name in _implementations(lines):
        cells = [{direction: index.get((name, seq_len, direction)) for direction in DIRECTION_NAMES}
                 for seq_len in seq_lens]
        tflops_rows.append([name, *(_cell(cell, lambda line: f"{line['tflops']:.0f}") for cell in cells)])
        memory_rows.append([name, *(_cell(cell, lambda line: f"{line['peak_bytes'] / 2**20:.0f}") for cell in cells)])
    return ["implementation", *(f"S={seq_len}" for seq_len in seq_lens)], tflops_rows, memory_rows


# The bundled kernel's speed is reported as a ratio to these peers (issue targets: >= 1.0x
# FlexAttention, >= 1.2x / 1.1x SDPA flash forward / backward, cuDNN for reference).
RATIO_PEERS = ("sdpa-flash", "flex", "sdpa-cudnn")


def ratio_rows(lines: list[dict]) -> tuple[list[str], list[list]]:
    """(headers, rows) of one panel: the bundled kernel's TFLOP/s over each peer's, per S."""
    seq_lens = sorted({line["seq_len"] for line in lines})
    index = {(line["impl"], line["seq_len"], line["direction"]): line for line in lines if line["status"] == "ok"}
    rows = []
    for peer in RATIO_PEERS:
        cells = []
        for seq_len in seq_lens:
            parts = []
            for direction in DIRECTION_NAMES:
                mine, theirs = index.get(("bundled", seq_len, direction)), index.get((peer, seq_len, direction))
                parts.append(f"{mine['tflops'] / theirs['tflops']:.2f}" if mine and theirs else "-")
            cells.append(" / ".join(parts))
        if any(cell != "- / -" for cell in cells):
            rows.append([f"bundled / {peer}", *cells])
    return ["ratio", *(f"S={seq_len}" for seq_len in seq_lens)], rows


def not_measured(lines: list[dict]) -> list[str]:
    """One bullet per distinct (implementation, status, reason), with the S and directions it covers."""
    groups = defaultdict(list)
    for line in lines:
        if line["status"] != "ok":
            groups[(line["impl"], line["status"], line["reason"])].append(f"{line['direction']} S={line['seq_len']}")
    return [f"* {name} {status} ({', '.join(where)}): {reason}" for (name, status, reason), where in groups.items()]


def environment_table(env: dict) -> list[str]:
    rows = [[key, summary.format_env_value(key, env[key])] for key in _ENV_KEYS if env.get(key) is not None]
    return [markdown_table(["field", "value"], rows)]


def repetitions_text(env: dict) -> str:
    """How many calls were timed and how (env.json's repetition policy), for the method paragraph."""
    reps = env.get("benchmark", {}).get("repetitions") or {}
    return (f"{reps['min_reps']}–{reps['max_reps']} calls, as many as fit in {reps['target_ms']:g} ms, "
            f"after a warm-up call; the implementations of a problem take turns in "
            f"{reps.get('rounds', 1)} round(s), each turn after {reps.get('warmup_ms', 0):g} ms / rounds "
            f"of untimed calls, so that none gains from the GPU's clock state"
            if reps else "see env.json")


def markdown(env: dict, lines: list[dict], plot_name: str | None) -> str:
    """benchmark.md's text."""
    reps_text = repetitions_text(env)
    out = ["# Attention benchmark: bundled Triton kernel, torch SDPA and FlexAttention", "",
           *environment_table(env), "",
           "Method: FLOPs count the matmuls only (4·B·H·S²·D forward, halved when causal; backward 2.5× the "
           "forward); shapes B = 32k tokens / S, H = 2048 / D. Time: median of CUDA-event timed calls "
           f"({reps_text}); forward under torch.no_grad(), backward "
           "through a recorded graph. Memory: torch.cuda.max_memory_allocated() minus memory_allocated() "
           "before one call (outputs and workspaces, not the inputs). Each cell: forward / backward. "
           "FlexAttention (`flex`) ran compiled by torch.compile (static shapes, recompile limit raised, "
           "failing rather than falling back to its eager path); the bundled kernel and SDPA ran eagerly.", ""]
    if plot_name:
        out += [f"![{_PLOT_TITLE}]({plot_name})", ""]
    for (dtype, head_dim, causal), panel in panels_of(lines).items():
        headers, tflops_rows, memory_rows = panel_tables(panel)
        out += [f"## {panel_title(dtype, head_dim, causal)}", "", "TFLOP/s (forward / backward):", "",
                markdown_table(headers, tflops_rows), ""]
        ratio_headers, ratios = ratio_rows(panel)
        if ratios:
            out += ["Speed of the bundled kernel relative to each peer (forward / backward):", "",
                    markdown_table(ratio_headers, ratios), ""]
        out += [
                "Peak memory per call, MiB (forward / backward):", "",
                markdown_table(headers, memory_rows), ""]
        missing = not_measured(panel)
        if missing:
            out += ["Not measured:", "", *missing, ""]
    return "\n".join(out).rstrip() + "\n"


def terminal_table(env: dict, lines: list[dict]) -> str:
    """TFLOP/s of every panel as plain-text tables (printed at the end of a run)."""
    out = [f"{env.get('device', '?')}  torch {env.get('torch', '?')}  triton {env.get('triton', '?')}"]
    for key, panel in panels_of(lines).items():
        headers, tflops_rows, _ = panel_tables(panel)
        ratio_headers, ratios = ratio_rows(panel)
        out += ["", f"{panel_title(*key)}: TFLOP/s forward / backward",
                tabulate(tflops_rows + ratios, headers=headers, tablefmt="simple", disable_numparse=True)]
    return "\n".join(out)


def plot_series(lines: list[dict]) -> list[tuple[str, dict]]:
    """[(panel title, {(implementation, direction): [(S, TFLOP/s), ...]})] of the measured lines."""
    panels = []
    for key, panel in panels_of(lines).items():
        series = defaultdict(list)
        for line in panel:
            if line["status"] == "ok":
                series[(line["impl"], DIRECTION_NAMES[line["direction"]])].append((line["seq_len"], line["tflops"]))
        panels.append((panel_title(*key), dict(series)))
    return panels


def write_plot(run_dir: Path, lines: list[dict], palette: dict | None = None, title: str = _PLOT_TITLE) -> Path:
    """benchmark.svg: TFLOP/s against S, one line per implementation (its colour from
    `palette`, default COLORS; black for one not there) and direction."""
    panels = plot_series(lines)
    colors = {name: (palette or COLORS).get(name, "#000000") for name in _implementations(lines)}
    path = run_dir / "benchmark.svg"
    path.write_text(svg.line_panels(panels, colors, DASHES, "sequence length S", "TFLOP/s", title),
                    encoding="utf-8")
    return path


def write_report(run_dir) -> list[Path]:
    """Write the plot and benchmark.md into the run folder; returns their paths."""
    run_dir = Path(run_dir)
    env, lines = read_run(run_dir)
    plot = write_plot(run_dir, lines)
    path = run_dir / MARKDOWN_FILE
    text = markdown(env, lines, plot.name)
    harness = harness_throughput.load(run_dir)
    if harness:
        text += "\n" + "\n".join(harness_throughput.markdown_lines(harness))
    path.write_text(text, encoding="utf-8")
    return [path, plot]
