"""The attention-variants report, rendered from a run folder's benchmark.jsonl and env.json only.

benchmark.md: the environment, the method, the issue's targets with how many cells meet
each, one table per variant with the ratios the targets are stated in (forward /
backward per cell), then per (dtype, head dim) panel the TFLOP/s and peak memory of every
implementation (report.panel_tables) and what was not measured; benchmark.svg, TFLOP/s
against S (report.write_plot).

The ratios, each from the medians of one cell and direction:

* window:  bundled / Flex speed = Flex ms / bundled ms (>= 1.0), and bundled window ms /
  (dense causal ms x band fraction) (<= 1.2): the band fraction is the window's visible
  pairs over causal's, so this is how far the windowed kernel is from scaling with its band;
* varlen:  varlen TFLOP/s / dense causal TFLOP/s (>= 0.9), each over its own visible pairs:
  the same B·S tokens, as mixed lengths or as B sequences of S;
* softcap, ALiBi:  variant ms / plain causal ms (<= 1.15: at most 15 % slower) and
  bundled / Flex speed (>= 1.0); softcap_large (scores of std 8, variants.LARGE_LOGITS) is
  held to softcap's two targets, against the same plain causal time (plain attention's
  cost does not depend on the values), in target rows of its own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from conformance.bundled.benchmarks import report
from conformance.bundled.benchmarks.variants import BASELINE, BUNDLED, FLEX, LARGE_LOGITS, Entry
from conformance.reporting.markdown import table as markdown_table

DIRECTIONS = tuple(report.DIRECTION_NAMES)
PALETTE = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
VARIANT_TITLES = {"softcap": "softcap", "softcap_large": "softcap, scores of std 8", "alibi": "ALiBi"}
SCORE_VARIANTS = tuple(VARIANT_TITLES)  # judged by score_table's two targets each
# benchmark.md's section of each score variant
SECTION_TITLES = {"softcap": "Softcap",
                  "softcap_large": f"Softcap at large logits (q × {LARGE_LOGITS:g}: scaled scores of std {LARGE_LOGITS:g})",
                  "alibi": "ALiBi"}
_PLOT_TITLE = "TFLOP/s over the visible pairs against S (solid: forward, dashed: backward)"


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: a ratio that must be at least (or at most) `bound`."""

    key: str
    text: str
    bound: float
    at_least: bool

    def met(self, ratio: float) -> bool:
        return ratio >= self.bound if self.at_least else ratio <= self.bound


TARGETS = {target.key: target for target in (
    Target("window_flex", "windowed: bundled ≥ 1.0× FlexAttention's speed", 1.0, True),
    Target("window_band", "windowed: time ≤ 1.2× (dense causal time × band fraction)", 1.2, False),
    Target("varlen_dense", "varlen: TFLOP/s ≥ 0.9× the dense kernel's at equal total tokens", 0.9, True),
    Target("softcap_plain", "softcap: time ≤ 1.15× plain causal (at most 15 % slower)", 1.15, False),
    Target("softcap_flex", "softcap: bundled ≥ 1.0× FlexAttention's speed", 1.0, True),
    Target("softcap_large_plain", "softcap, scores of std 8: time ≤ 1.15× plain causal", 1.15, False),
    Target("softcap_large_flex", "softcap, scores of std 8: bundled ≥ 1.0× FlexAttention's speed", 1.0, True),
    Target("alibi_plain", "ALiBi: time ≤ 1.15× plain causal (at most 15 % slower)", 1.15, False),
    Target("alibi_flex", "ALiBi: bundled ≥ 1.0× FlexAttention's speed", 1.0, True),
)}


def _index(lines: list[dict]) -> dict:
    """(dtype, head_dim, seq_len, impl, direction) -> the measured ("ok") line."""
    return {(line["dtype"], line["head_dim"], line["seq_len"], line["impl"], line["direction"]): line
            for line in lines if line["status"] == "ok"}


def _cells(lines: list[dict]) -> list[tuple[str, int, int]]:
    """(dtype, head_dim, seq_len) of every cell, in first-seen order."""
    return list(dict.fromkeys((line["dtype"], line["head_dim"], line["seq_len"]) for line in lines))


def _params(lines: list[dict], variant: str) -> list:
    return list(dict.fromkeys(line["param"] for line in lines if line.get("variant") == variant))


def ratios(lines: list[dict]) -> list[dict]:
    """Every target's ratio where both its measurements are there: {target, dtype, head_dim,
    seq_len, param, direction, ratio, met} (module docstring: which ratio)."""
    index, out = _index(lines), []

    def add(key, cell, param, direction, ratio):
        out.append({"target": key, "dtype": cell[0], "head_dim": cell[1], "seq_len": cell[2], "param": param,
                    "direction": direction, "ratio": ratio, "met": TARGETS[key].met(ratio)})
    for cell in _cells(lines):
        for direction in DIRECTIONS:
            def line(kernel, variant, param=None):
                return index.get((*cell, Entry(kernel, variant, param).name, direction))
            dense = line(BUNDLED, BASELINE)
            for left in _params(lines, "window"):
                mine, flex = line(BUNDLED, "window", left), line(FLEX, "window", left)
                if mine and flex:
                    add("window_flex", cell, left, direction, flex["median_ms"] / mine["median_ms"])
                if mine and dense:
                    add("window_band", cell, left, direction,
                        mine["median_ms"] / (dense["median_ms"] * mine["band_fraction"]))
            varlen = line(BUNDLED, "varlen")
            if varlen and dense:
                add("varlen_dense", cell, None, direction, varlen["tflops"] / dense["tflops"])
            for variant in SCORE_VARIANTS:
                for param in _params(lines, variant):
                    mine, flex = line(BUNDLED, variant, param), line(FLEX, variant, param)
                    if mine and dense:
                        add(f"{variant}_plain", cell, param, direction, mine["median_ms"] / dense["median_ms"])
                    if mine and flex:
                        add(f"{variant}_flex", cell, param, direction, flex["median_ms"] / mine["median_ms"])
    return out


def _pair(values: dict, fmt) -> str:
    """"fwd / bwd" of a {direction: value or None}; "-" where missing."""
    return " / ".join("-" if values.get(direction) is None else fmt(values[direction]) for direction in DIRECTIONS)


def _met(found: dict, keys: tuple[str, ...]) -> str:
    """"yes / no" per direction: every judged target of the row met; "-" where none was judged."""
    parts = []
    for direction in DIRECTIONS:
        judged = [found[(key, direction)] for key in keys if (key, direction) in found]
        parts.append("-" if not judged else "yes" if all(item["met"] for item in judged) else "no")
    return " / ".join(parts)


def _row_ratios(judged: list[dict], cell, param) -> dict:
    return {(item["target"], item["direction"]): item for item in judged
            if (item["dtype"], item["head_dim"], item["seq_len"]) == cell and item["param"] == param}


def _ms(index, cell, name) -> dict:
    return {direction: (index.get((*cell, name, direction)) or {}).get("median_ms") for direction in DIRECTIONS}


def _ratio_cells(found: dict, key: str) -> dict:
    return {direction: found[(key, direction)]["ratio"] for direction in DIRECTIONS if (key, direction) in found}


def _any_line(lines: list[dict], cell, name: str) -> dict | None:
    """A line of implementation `name` in the cell, measured or not (for what it was given)."""
    return next((line for line in lines if line["impl"] == name
                 and (line["dtype"], line["head_dim"], line["seq_len"]) == cell), None)


def window_table(lines: list[dict], judged: list[dict]) -> tuple[list[str], list[list]]:
    index, rows = _index(lines), []
    for cell in _cells(lines):
        dense = _ms(index, cell, Entry(BUNDLED, BASELINE).name)
        for left in _params(lines, "window"):
            mine = _ms(index, cell, Entry(BUNDLED, "window", left).name)
            fraction = (_any_line(lines, cell, Entry(BUNDLED, "window", left).name) or {}).get("band_fraction")
            scaled = {d: None if dense[d] is None or fraction is None else dense[d] * fraction for d in DIRECTIONS}
            found = _row_ratios(judged, cell, left)
            rows.append([*cell, left, "-" if fraction is None else f"{fraction:.3f}", _pair(mine, "{:.2f}".format),
                         _pair(_ms(index, cell, Entry(FLEX, "window", left).name), "{:.2f}".format),
                         _pair(scaled, "{:.2f}".format), _pair(_ratio_cells(found, "window_flex"), "{:.2f}".format),
                         _pair(_ratio_cells(found, "window_band"), "{:.2f}".format),
                         _met(found, ("window_flex", "window_band"))])
    return (["dtype", "D", "S", "left", "band fraction", "bundled ms", "Flex ms", "dense ms × fraction",
             "bundled / Flex speed (≥ 1.0)", "bundled / (dense × fraction) time (≤ 1.2)", "targets met"], rows)


def varlen_table(lines: list[dict], judged: list[dict]) -> tuple[list[str], list[list]]:
    index, rows = _index(lines), []
    varlen_name, dense_name = Entry(BUNDLED, "varlen").name, Entry(BUNDLED, BASELINE).name
    for cell in _cells(lines):
        varlen = _any_line(lines, cell, varlen_name)
        if varlen is None:
            continue
        lengths = varlen["lengths"]
        tflops = [{d: (index.get((*cell, name, d)) or {}).get("tflops") for d in DIRECTIONS}
                  for name in (varlen_name, dense_name)]
        found = _row_ratios(judged, cell, None)
        rows.append([*cell, f"{len(lengths)}, mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}",
                     _pair(_ms(index, cell, varlen_name), "{:.2f}".format),
                     _pair(_ms(index, cell, dense_name), "{:.2f}".format),
                     *(_pair(values, "{:.0f}".format) for values in tflops),
                     _pair(_ratio_cells(found, "varlen_dense"), "{:.2f}".format), _met(found, ("varlen_dense",))])
    return (["dtype", "D", "S", "sequences", "varlen ms", "dense ms", "varlen TFLOP/s", "dense TFLOP/s",
             "varlen / dense TFLOP/s (≥ 0.9)", "target met"], rows)


def score_table(lines: list[dict], judged: list[dict], variant: str) -> tuple[list[str], list[list]]:
    """Softcap's or ALiBi's table: time against plain causal and against FlexAttention."""
    index, rows = _index(lines), []
    for cell in _cells(lines):
        for param in _params(lines, variant):
            found = _row_ratios(judged, cell, param)
            slowdown = {d: (ratio - 1) * 100 for d, ratio in _ratio_cells(found, f"{variant}_plain").items()}
            rows.append([*cell, _pair(_ms(index, cell, Entry(BUNDLED, BASELINE).name), "{:.2f}".format),
                         _pair(_ms(index, cell, Entry(BUNDLED, variant, param).name), "{:.2f}".format),
                         _pair(_ms(index, cell, Entry(FLEX, variant, param).name), "{:.2f}".format),
                         _pair(slowdown, "{:+.1f} %".format),
                         _pair(_ratio_cells(found, f"{variant}_flex"), "{:.2f}".format),
                         _met(found, (f"{variant}_plain", f"{variant}_flex"))])
    return (["dtype", "D", "S", "plain ms", f"{VARIANT_TITLES[variant]} ms", "Flex ms", "slower than plain (≤ 15 %)",
             "bundled / Flex speed (≥ 1.0)", "targets met"], rows)


def _where(item: dict) -> str:
    """Where a judged ratio was taken, e.g. "bf16 D128 S8192 left 1024 bwd (1.31)"."""
    window = f" left {item['param']:g}" if item["target"].startswith("window") else ""
    return f"{item['dtype']} D{item['head_dim']} S{item['seq_len']}{window} {item['direction']} ({item['ratio']:.2f})"


def target_summary(judged: list[dict]) -> tuple[list[str], list[list]]:
    """Per target: met in how many of the (cell, direction) pairs judged, and where not."""
    groups = defaultdict(list)
    for item in judged:
        groups[item["target"]].append(item)
    rows = []
    for key, target in TARGETS.items():
        items = groups.get(key, [])
        met = f"{sum(item['met'] for item in items)} of {len(items)}" if items else "not measured"
        rows.append([target.text, met, ", ".join(_where(item) for item in items if not item["met"]) or "-"])
    return ["target", "met (cells × directions)", "not met at (ratio)"], rows


def _method(env: dict) -> str:
    plan = env.get("benchmark", {}).get("plan", {})
    windows, tokens, width = plan.get("windows"), plan.get("tokens", 32 * 1024), plan.get("width", 2048)
    return (f"Method: every cell is causal, shapes B = {tokens} tokens / S, H = {width} / D. **TFLOP/s count only the "
            "visible (query, key) pairs**: 4·D·H FLOPs per pair forward, the backward 2.5× (dense causal S(S+1)/2 "
            "pairs per sequence, a window its band, varlen the causal pairs of each of its sequences). Time: median "
            f"of CUDA-event timed calls ({report.repetitions_text(env)}); all implementations of a cell and direction "
            "take turns; forward under torch.no_grad(), backward through a recorded graph. Memory: "
            "torch.cuda.max_memory_allocated() minus memory_allocated() before one call. Each cell: forward / "
            "backward. FlexAttention ran compiled by torch.compile (static shapes, recompile limit raised, "
            "failing rather than falling back to its eager path) with a block mask of the bundled kernel's "
            "bottom-right causal mask (windows: the causal sliding window"
            f"{' of ' + ', '.join(map(str, windows)) if windows else ''} keys back, as its mask_mod) and, for "
            "softcap and ALiBi, the equivalent score_mod; the bundled kernels ran eagerly. Varlen: one packed "
            "batch holding the cell's B·S tokens as sequences of mixed lengths (S·u³ at evenly spaced u: mean S/4, "
            "most of them short), against the dense kernel on the same tokens as B sequences of S.")


def markdown(env: dict, lines: list[dict], plot_name: str | None) -> str:
    """benchmark.md's text."""
    judged = ratios(lines)
    out = ["# Attention variants: bundled Triton kernels against FlexAttention and the dense kernel", "",
           *report.environment_table(env), "", _method(env), "", "## Targets", "",
           markdown_table(*target_summary(judged)), ""]
    if plot_name:
        out += [f"![{_PLOT_TITLE}]({plot_name})", ""]
    sections = [("Sliding window (left, 0), causal", window_table(lines, judged)),
                ("Variable-length batches (varlen) at equal total tokens", varlen_table(lines, judged)),
                *((SECTION_TITLES[variant], score_table(lines, judged, variant)) for variant in SCORE_VARIANTS)]
    for title, (headers, rows) in sections:
        if rows:
            out += [f"## {title}", "", "Each cell: forward / backward.", "", markdown_table(headers, rows), ""]
    for (dtype, head_dim, causal), panel in report.panels_of(lines).items():
        headers, tflops_rows, memory_rows = report.panel_tables(panel)
        out += [f"## {report.panel_title(dtype, head_dim, causal)}: every implementation", "",
                "TFLOP/s over the visible pairs (forward / backward):", "", markdown_table(headers, tflops_rows), "",
                "Peak memory per call, MiB (forward / backward):", "", markdown_table(headers, memory_rows), ""]
        missing = report.not_measured(panel)
        if missing:
            out += ["Not measured:", "", *missing, ""]
    return "\n".join(out).rstrip() + "\n"


def terminal_summary(lines: list[dict]) -> str:
    """The targets and the per-variant tables, as printed at the end of a run."""
    from tabulate import tabulate

    judged = ratios(lines)
    out = []
    for title, (headers, rows) in (("targets", target_summary(judged)),
                                   ("window (forward / backward)", window_table(lines, judged)),
                                   ("varlen (forward / backward)", varlen_table(lines, judged)),
                                   *((f"{VARIANT_TITLES[variant]} (forward / backward)",
                                      score_table(lines, judged, variant)) for variant in SCORE_VARIANTS)):
        if rows:
            out += ["", title, tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)]
    return "\n".join(out)


def write_report(run_dir) -> list[Path]:
    """Write the plot and benchmark.md into the run folder; returns their paths."""
    run_dir = Path(run_dir)
    env, lines = report.read_run(run_dir)
    names = list(dict.fromkeys(line["impl"] for line in lines))
    palette = {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(names)}
    plot = report.write_plot(run_dir, lines, palette, _PLOT_TITLE)
    path = run_dir / report.MARKDOWN_FILE
    path.write_text(markdown(env, lines, plot.name), encoding="utf-8")
    return [path, plot]
