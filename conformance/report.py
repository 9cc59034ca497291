"""Reports rendered from a run's files only: results.jsonl and env.json.

Nothing here recomputes a number: every count, ratio and command comes from the
results lines, so a report can be rebuilt (`python -m conformance report DIR`) on
any machine, long after the run.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

from tabulate import tabulate

from conformance import verdicts
from conformance.catalog import DIRECTIONS, DTYPES
from conformance.results import SUMMARY_FILE, read_env, read_results

# Verdicts listed case by case at the top of a report, in this order.
PROBLEM_VERDICTS = (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR, verdicts.XPASS)
_GROUP_FIELDS = ("op", "direction", "dtype", "head_dim", "causal")
_ENV_ORDER = ("device", "backend", "arch", "driver", "cuda_runtime", "hip_runtime", "torch", "triton",
              "numpy", "python", "platform", "harness", "time_utc", "tier", "implementation", "command")


# --- formatting helpers ------------------------------------------------------------

def format_ratio(ratio) -> str:
    if ratio is None:
        return "-"
    if math.isnan(ratio) or math.isinf(ratio):
        return str(ratio)
    return f"{ratio:.3g}"


def format_error(value) -> str:
    return "-" if value is None else f"{value:.3e}"


def _code(text: str) -> str:
    return f"`{text}`"


def _format_env_value(key: str, value) -> str:
    if key == "harness" and isinstance(value, dict):
        revision = value.get("revision") or "unknown"
        return f"{revision}{' (dirty)' if value.get('dirty') else ''}"
    if isinstance(value, dict):
        return ", ".join(f"{name}={item}" for name, item in value.items())
    if isinstance(value, list):
        return "; ".join(str(item) for item in value)
    return "-" if value is None else str(value)


def _worst(ratios):
    """Largest ratio, NaN counting as worst; None for no ratios."""
    ratios = [math.inf if math.isnan(r) else r for r in ratios if r is not None]
    return max(ratios) if ratios else None


# --- tables computed from the lines ------------------------------------------------

def verdict_totals(lines: list[dict]) -> Counter:
    """Cases per verdict."""
    return Counter(line["verdict"] for line in lines)


def _present_verdicts(lines: list[dict]) -> list[str]:
    seen = verdict_totals(lines)
    return [verdict for verdict in verdicts.VERDICTS if verdict == verdicts.PASS or seen[verdict]]


def _group_sort_key(key: tuple):
    op, direction, dtype, head_dim, causal = key
    order = lambda values, value: values.index(value) if value in values else len(values)  # noqa: E731
    return (op, order(DIRECTIONS, direction), order(DTYPES, dtype), head_dim, causal)


def group_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Rows per op x direction x dtype x head dim x causal: verdict counts, worst ratio."""
    columns = _present_verdicts(lines)
    groups = defaultdict(list)
    for line in lines:
        groups[tuple(line[field] for field in _GROUP_FIELDS)].append(line)
    rows = []
    for key in sorted(groups, key=_group_sort_key):
        counts = verdict_totals(groups[key])
        op, direction, dtype, head_dim, causal = key
        rows.append([op, direction, dtype, head_dim, "causal" if causal else "noncausal",
                     *(counts[verdict] or "" for verdict in columns),
                     format_ratio(_worst(line["worst_ratio"] for line in groups[key]))])
    return ["op", "dir", "dtype", "D", "mask", *columns, "worst ratio"], rows


def tensor_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Rows per tensor name: cases judged, worst ratio and the case it came from."""
    worst = {}
    for line in lines:
        for tensor in line.get("tensors", []):
            ratio = _worst([tensor["ratio"]])
            count, best_ratio, case = worst.get(tensor["name"], (0, None, None))
            if best_ratio is None or ratio > best_ratio:
                best_ratio, case = ratio, line["case"]
            worst[tensor["name"]] = (count + 1, best_ratio, case)
    rows = [[name, count, format_ratio(ratio), _code(case)] for name, (count, ratio, case) in worst.items()]
    return ["tensor", "cases", "worst ratio", "case"], rows


def _tensor_rows(line: dict) -> list[list]:
    return [[t["name"], format_error(t["kernel_err"]), format_error(t["torch_err"]),
             format_error(t.get("floor")), format_ratio(t["ratio"])] for t in line.get("tensors", [])]


_TENSOR_HEADERS = ["tensor", "kernel_err", "torch_err", "floor", "ratio"]


def _problems(lines: list[dict]) -> list[dict]:
    order = {verdict: index for index, verdict in enumerate(PROBLEM_VERDICTS)}
    return sorted((line for line in lines if line["verdict"] in order), key=lambda line: order[line["verdict"]])


def _totals_text(lines: list[dict]) -> str:
    totals = verdict_totals(lines)
    parts = [f"{verdict} {totals[verdict]}" for verdict in verdicts.VERDICTS if totals[verdict]]
    return f"{len(lines)} case{'' if len(lines) == 1 else 's'}: " + ", ".join(parts)


# --- markdown ----------------------------------------------------------------------

def _markdown_table(headers, rows) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _environment_section(env: dict) -> list[str]:
    notes = env.get("profile_notes") or []
    keys = [key for key in _ENV_ORDER if key in env]
    keys += [key for key in env if key not in _ENV_ORDER and key != "profile_notes"]
    rows = [[key, _format_env_value(key, env[key]).replace("|", "\\|")] for key in keys]
    out = ["## Environment", "", _markdown_table(["field", "value"], rows) if rows else "(no env.json)", ""]
    if notes:
        out += ["Backend notes:", "", *(f"* {note}" for note in notes), ""]
    return out


def _problem_section(lines: list[dict]) -> list[str]:
    problems = _problems(lines)
    out = ["## Not passing (fail, nonfinite, error, xpass)", ""]
    if not problems:
        return out + ["None.", ""]
    for line in problems:
        out += [f"### {line['verdict']}: {_code(line['case'])}", "", line.get("reason") or "", ""]
        if line.get("tensors"):
            out += [_markdown_table(_TENSOR_HEADERS, _tensor_rows(line)), ""]
        if line.get("traceback"):
            out += ["```", line["traceback"], "```", ""]
        out += [f"Reproduce: {_code(line['reproduce'])}", ""]
    return out


def _xfail_section(lines: list[dict]) -> list[str]:
    rows = [[_code(line["case"]), line["known_issue"]["id"], line["known_issue"]["description"],
             line.get("rule_verdict") or "", format_ratio(line.get("worst_ratio"))]
            for line in lines if line["verdict"] == verdicts.XFAIL]
    if not rows:
        return []
    return ["## Known issues (xfail)", "",
            _markdown_table(["case", "issue", "description", "judged", "worst ratio"], rows), ""]


def _unsupported_section(lines: list[dict]) -> list[str]:
    by_reason = defaultdict(list)
    for line in lines:
        if line["verdict"] == verdicts.UNSUPPORTED:
            by_reason[line["reason"]].append(line["case"])
    if not by_reason:
        return []
    rows = [[reason, len(cases), _code(cases[0])] for reason, cases in by_reason.items()]
    return ["## Unsupported", "", _markdown_table(["reason", "cases", "first case"], rows), ""]


def markdown_report(env: dict, lines: list[dict]) -> str:
    """summary.md: environment, totals, tables, problems with reproducers, xfail, unsupported."""
    implementation = env.get("implementation")
    parts = ["# Conformance report", "",
             f"{_totals_text(lines)}. Rule: kernel_err <= 2 x max(torch_err, floor) for every tensor.", ""]
    if implementation:
        parts += [f"Implementation: {_format_env_value('implementation', implementation)}", ""]
    parts += _environment_section(env)
    totals = verdict_totals(lines)
    parts += ["## Totals", "", _markdown_table(["verdict", "cases"],
                                               [[v, totals[v]] for v in verdicts.VERDICTS]), ""]
    parts += ["## By operator, direction, dtype, head dim and mask", "", _markdown_table(*group_table(lines)), ""]
    parts += ["## Worst ratio per tensor", "", _markdown_table(*tensor_table(lines)), ""]
    parts += _problem_section(lines)
    parts += _xfail_section(lines)
    parts += _unsupported_section(lines)
    return "\n".join(parts).rstrip() + "\n"


# --- terminal ----------------------------------------------------------------------

def terminal_report(env: dict, lines: list[dict]) -> str:
    """The compact text printed at the end of a run."""
    headers, rows = group_table(lines)
    out = [f"Conformance on {env.get('backend', '?')} ({env.get('device', '?')}): {_totals_text(lines)}",
           "", tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True), ""]
    tensor_headers, tensor_rows = tensor_table(lines)
    if tensor_rows:
        out += [tabulate([row[:3] for row in tensor_rows], headers=tensor_headers[:3], tablefmt="simple",
                         disable_numparse=True), ""]
    for line in _problems(lines):
        out += [f"{line['verdict'].upper():9s} {line['case']}  worst ratio {format_ratio(line.get('worst_ratio'))}",
                f"          {line.get('reason', '')}",
                f"          reproduce: {line['reproduce']}"]
    return "\n".join(out).rstrip() + "\n"


# --- files -------------------------------------------------------------------------

def write_summary(run_dir: str | Path) -> Path:
    """(Re)write DIR/summary.md from DIR/results.jsonl and DIR/env.json."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    path.write_text(markdown_report(read_env(run_dir), read_results(run_dir)), encoding="utf-8")
    return path


def render_run(run_dir: str | Path) -> str:
    """Write summary.md and return the terminal report of a run folder."""
    run_dir = Path(run_dir)
    write_summary(run_dir)
    return terminal_report(read_env(run_dir), read_results(run_dir)) + f"\nsummary: {run_dir / SUMMARY_FILE}\n"
