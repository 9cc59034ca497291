"""The text printed at the end of a run and by `python -m conformance report`.

ASCII grid tables (tabulate's psql format: safe on any console encoding), the
lines that fail the run last, so they are what stays on screen.
"""

from __future__ import annotations

from tabulate import tabulate

from conformance.reporting import compile_time, declared, time_breakdown
from conformance.reporting import configurations, devices, localized, merge, summary


def grid(headers, rows) -> str:
    return tabulate(rows, headers=headers, tablefmt="psql", disable_numparse=True)


def _problem_lines(line: dict) -> list[str]:
    ratio = f"  worst ratio {summary.format_ratio(line['worst_ratio'])}" if line.get("worst_ratio") is not None else ""
    out = [f"{line['verdict'].upper():9s} {line['case']}{ratio}",
           f"          {summary.one_line(line.get('reason'), 400)}"]
    if line.get("backend_fault"):
        out.append(f"          {line['backend_fault']}")
    out += [f"          {text}" for text in localized.where_lines(line)]
    if line.get("reproduce"):
        out.append(f"          reproduce: {line['reproduce']}")
    return out


def _optional_table(title: str, headers, rows) -> list[str]:
    return [title, grid(headers, rows), ""] if rows else []


def render(env: dict, lines: list[dict]) -> str:
    """Header, probes, case summary, worst ratio per tensor, compile overview,
    known issues, unsupported reasons, then every line that fails the run."""
    out = [f"Conformance on {env.get('backend', '?')} ({env.get('device', '?')}): {summary.totals_text(lines)}", ""]
    out += [f"MERGE WARNING: {warning}" for warning in env.get("merge_warnings") or []]
    for text in (time_breakdown.summary_text(env, lines), summary.determinism_text(lines, env)):
        out += [text, ""] if text else []
    conventions = declared.convention_sentences(lines)
    out += [*(f"judged as declared: {sentence}" for sentence in conventions), ""] if conventions else []
    out += _optional_table("merged runs", *merge.machine_table(env))
    out += _optional_table("implementations", *summary.implementation_table(env, lines))
    out += _optional_table("cases per GPU", *devices.gpu_table(env, lines))
    out += _optional_table(compile_time.TITLE.lower(), *compile_time.compile_time_table(lines))
    out += _optional_table("primitive probes", *summary.probe_table(lines))
    if summary.of_kind(lines, summary.CASE):
        out += [grid(*summary.group_table(lines)), ""]
        tensor_headers, tensor_rows = summary.tensor_table(lines)
        out += _optional_table("worst ratio per tensor", tensor_headers[:3], [row[:3] for row in tensor_rows])
    out += _optional_table("launch configurations per kernel", *configurations.kernel_totals(lines))
    failing = configurations.failing_configurations(lines)
    if failing:
        out += [f"failing launch configurations: {' '.join(failing)}", ""]
    out += _optional_table("compile-only checks per target", *summary.compile_overview(lines))
    _, issue_rows = summary.known_issue_table(lines)
    out += _optional_table("known issues", ["issue", "xfail", "xpass"], [[r[0], r[3], r[4]] for r in issue_rows])
    out += _optional_table("unsupported", *summary.unsupported_table(lines))
    for line in summary.problems(lines):
        out += _problem_lines(line)
    return "\n".join(out).rstrip() + "\n"
