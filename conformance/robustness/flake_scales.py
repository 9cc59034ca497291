"""False alarms across input distributions: the flake set under the value scales peers test with.

    python -m conformance flake --distributions peers [--seeds 20] [--out DIR] ...

runs the flake set (conformance.robustness.flake) once per distribution, each into DIR/<distribution>/
(its own results.jsonl, env.json and flake.md), and writes DIR/flake-scales.md:

* per distribution: judged cases, false alarms, rate, the worst ratio and where;
* per dtype and tensor: the worst ratio under each distribution (false alarms in brackets);
* every borderline event (a tensor over the bound of 2, up to 3 and beyond) dissected:
  the kernel's and the torch path's errors in ulps of the tensor's dtype at the
  reference's magnitude, the floor and its delta-noise part (conformance.judging.rule).

`peers` is the distributions FlagAttention's and FlashAttention's suites draw from, and
the ones this harness adds to push the numerics: inputs times 1, 2, 4 and 10, large
logits, outliers and near-constant scores.
"""

from __future__ import annotations

import math
from pathlib import Path

from conformance.cases.catalog import Case
from conformance.judging.rule import UNIT_ROUNDOFF
from conformance.reporting import summary
from conformance.reporting.markdown import code, table
from conformance.robustness import flake
from conformance.running.results import folders_with_results
from conformance.running.runner import expected_dtype

PEERS = ("scaled:1", "scaled:2", "scaled:4", "scaled:10", "logits:64", "outliers:16", "nearconst:0.001")
PRESETS = {"peers": PEERS}
REPORT_FILE = "flake-scales.md"
SHARED_ROUNDINGS = (
    "Rounding steps the kernel and the torch path share (reference.MATCHED): inputs in their dtype; "
    "P rounded to the input dtype before P.V and P^T.dO; the output O stored in the input dtype, "
    "which delta = rowsum(dO * O) reads; dS rounded before dS.K and dS^T.Q; fp32 accumulation; the "
    "final rounding of each result. The floor covers the final rounding (u * M), one fp32 rounding "
    "of the terms, and for dQ/dK the noise that O's rounding puts on them through delta "
    "(`delta_noise`) and the fp32 rounding of dP and delta that cancel in dP - delta "
    "(`accumulator_noise`; both reference/delta_noise.py).")


def distributions(text: str) -> list[str]:
    """A preset name or comma-separated specs -> the list of specs (checked by the run)."""
    if text in PRESETS:
        return list(PRESETS[text])
    specs = [spec.strip() for spec in text.split(",") if spec.strip()]
    if not specs:
        raise ValueError(f"--distributions: expected {', '.join(PRESETS)} or SPEC,SPEC,..., got {text!r}")
    return specs


def folder_name(spec: str) -> str:
    """scaled:4 -> scaled-4 (a folder name without a colon)."""
    return spec.replace(":", "-")


def run_folders(run_dir: str | Path) -> list[Path]:
    """The per-distribution run folders of a scales run, in name order."""
    return folders_with_results(run_dir, "*")


def ulps(error: float, magnitude: float, dtype: str) -> float | None:
    """`error` in units in the last place of `dtype` at `magnitude`."""
    if dtype not in UNIT_ROUNDOFF or not magnitude or not math.isfinite(error):
        return None
    return error / (2.0 * UNIT_ROUNDOFF[dtype] * 2.0 ** math.floor(math.log2(magnitude)))


def _spec(line: dict) -> str:
    return line.get("distribution") or "normal"


def _summary_rows(by_spec: dict) -> list[list]:
    rows = []
    for spec, lines in by_spec.items():
        alarms = sum(map(flake.false_alarm, lines))
        worst = max(lines, key=lambda line: summary.worst([line.get("worst_ratio")]) or 0.0)
        rows.append([spec, len(lines), alarms, f"{alarms / len(lines):.2%}" if lines else "-",
                     summary.format_ratio(worst.get("worst_ratio")), code(worst["case"])])
    return rows


def _pivot_rows(by_spec: dict) -> tuple[list[str], list[list]]:
    """(dtype, tensor) x distribution: the worst ratio, with the false alarms in brackets."""
    cells = {}
    for spec, lines in by_spec.items():
        for line in lines:
            for tensor in line.get("tensors", []):
                key = (expected_dtype(Case.from_id(line["case"]), tensor["name"]), tensor["name"])
                worst, alarms = cells.get((key, spec), (None, 0))
                ratio = summary.worst([tensor["ratio"]])
                worst = ratio if worst is None or (ratio is not None and ratio > worst) else worst
                cells[(key, spec)] = (worst, alarms + (not tensor["passed"]))
    keys = sorted({key for key, _ in cells})
    rows = []
    for key in keys:
        row = list(key)
        for spec in by_spec:
            worst, alarms = cells.get((key, spec), (None, 0))
            row.append("-" if worst is None else summary.format_ratio(worst) + (f" [{alarms}]" if alarms else ""))
        rows.append(row)
    return ["dtype", "tensor", *by_spec], rows


def borderline_events(lines: list[dict]) -> list[list]:
    """Every tensor over the bound: its errors in ulps at the reference's magnitude."""
    rows = []
    for line in lines:
        for tensor in line.get("tensors", []):
            if tensor["passed"] or not math.isfinite(tensor["ratio"]):
                continue
            dtype, magnitude = expected_dtype(Case.from_id(line["case"]), tensor["name"]), tensor.get("magnitude") or 0.0
            in_ulps = [ulps(tensor[key], magnitude, dtype) for key in ("kernel_err", "torch_err", "floor")]
            rows.append([code(line["case"]), _spec(line), tensor["name"], summary.format_ratio(tensor["ratio"]),
                         *("-" if value is None else f"{value:.2f}" for value in in_ulps),
                         *(f"{tensor.get(key, 0.0):.3g}" for key in ("delta_noise", "accumulator_noise")),
                         code(line["reproduce"])])
    return rows


def render(run_dir: str | Path) -> str:
    by_spec = {}
    for folder in run_folders(run_dir):
        for line in flake.judged_lines(folder):
            by_spec.setdefault(_spec(line), []).append(line)
    every = [line for lines in by_spec.values() for line in lines]
    alarms = sum(map(flake.false_alarm, every))
    groups = {Case.from_id(line["case"]).data_key for line in every}
    seeds = {line["seed"] for line in every}
    out = ["# False alarms across input distributions", "",
           f"{len(groups)} case groups x {len(seeds)} seeds x {len(by_spec)} distributions = {len(every)} judged "
           f"cases of the bundled kernels; **{alarms} false alarms**.", "",
           table(["distribution", "cases", "false alarms", "rate", "worst ratio", "at"], _summary_rows(by_spec)), "",
           "## Worst ratio per dtype and tensor", "", "[N]: false alarms of that tensor.", "",
           table(*_pivot_rows(by_spec)), "",
           "## Borderline events", "", SHARED_ROUNDINGS, ""]
    events = borderline_events(every)
    if events:
        out += ["Errors in ulps of the tensor's dtype at the reference's magnitude M (max |ref|).", "",
                table(["case", "distribution", "tensor", "ratio", "kernel ulps", "torch ulps", "floor ulps",
                       "delta noise", "accumulator noise", "reproduce"], events)]
    else:
        out += ["None: no tensor of any case went over the bound."]
    return "\n".join(out).rstrip() + "\n"


def write_report(run_dir: str | Path) -> tuple[Path, str]:
    text = render(run_dir)
    path = Path(run_dir) / REPORT_FILE
    path.write_text(text, encoding="utf-8")
    return path, text
