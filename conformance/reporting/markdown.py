"""summary.md: the report as GitHub-flavoured Markdown.

Order: environment, primitive probes, totals, what fails the run (each case or
compile check with its errors per tensor, reason, backend attribution and
reproducer; probes inform, they do not fail a run), known issues,
the case summary per operator x direction x dtype x head dim x mask, the worst
ratio per tensor, compile checks per target, and what was unsupported and why.
"""

from __future__ import annotations

from tabulate import tabulate

from conformance.reporting import compile_time, declared, time_breakdown
from conformance.reporting import configurations, devices, localized, merge, summary

# The longest environment value summary.md shows whole (summary.environment_rows).
ENV_VALUE_CHARS = 240
RULE_TEXT = "Rule: kernel_err <= 2 x max(torch_err, floor) for every tensor."
PROBES_TEXT = ("The Triton primitives the kernels rely on, each checked alone against torch. Probes do not fail "
               "a run (except `xpass`: a known-issue entry that no longer fails); a failing case whose kernels rely on a failing probe's primitive says so "
               "(\"likely backend fault\").")


def headline(lines: list[dict]) -> str:
    """The totals, and the rule when there are cases to judge by it."""
    rule = f" {RULE_TEXT}" if summary.of_kind(lines, summary.CASE) else ""
    return f"{summary.totals_text(lines)}.{rule}"


def table(headers, rows) -> str:
    """A GitHub table; `|` inside cells escaped, numbers left as written."""
    escape = lambda value: str(value).replace("|", "\\|")  # noqa: E731
    return tabulate([[escape(cell) for cell in row] for row in rows], headers=[escape(h) for h in headers],
                    tablefmt="github", disable_numparse=True)


def code(text: str) -> str:
    return f"`{text}`"


def _with_code_column(headers, rows, column: str):
    index = headers.index(column)
    return headers, [[*row[:index], code(row[index]), *row[index + 1:]] for row in rows]


def environment_section(env: dict) -> list[str]:
    rows = summary.environment_rows(env, ENV_VALUE_CHARS)
    out = ["## Environment", "", table(["field", "value"], rows) if rows else "(no env.json)", ""]
    notes = env.get("profile_notes") or []
    if notes:
        out += ["Backend notes:", "", *(f"* {note}" for note in notes), ""]
    headers, machines = merge.machine_table(env)
    if machines:
        out += ["Merged from these runs (one per shard or machine):", "", table(headers, machines), ""]
    return out


def probe_section(lines: list[dict]) -> list[str]:
    headers, rows = summary.probe_table(lines)
    if not rows:
        return []
    reproducers = [f"* {code(command)}" for command in summary.probe_reproducers(lines)]
    return ["## Primitive probes", "", PROBES_TEXT, "", table(headers, rows), "",
            *(["Reproduce:", "", *reproducers, ""] if reproducers else [])]


def problem_details(line: dict) -> list[str]:
    """One line that fails the run: heading, reason, attribution, tensors, traceback, reproducer."""
    out = [f"### {line['verdict']}: {code(line['case'])}", "", summary.plain(line.get("reason")), ""]
    if line.get("backend_fault"):
        out += [f"**{line['backend_fault']}**", ""]
    if line.get("tensors"):
        out += [table(summary.TENSOR_HEADERS, summary.tensor_rows(line)), ""]
    if localized.where_lines(line):
        out += ["Where:", "", *(f"* {text.strip()}" if not text.startswith("    ") else f"  * {text.strip()}"
                                for text in localized.where_lines(line)), ""]
    if line.get("traceback"):
        out += ["```", summary.plain(line["traceback"]), "```", ""]
    if line.get("reproduce"):
        out += [f"Reproduce: {code(line['reproduce'])}", ""]
    return out


def problem_section(lines: list[dict]) -> list[str]:
    out = ["## Not passing (fail, nonfinite, error, xpass)", ""]
    found = summary.problems(lines)
    if not found:
        return out + ["None.", ""]
    for line in found:
        out += problem_details(line)
    return out


def _optional_section(title: str, headers, rows, code_column: str) -> list[str]:
    """A titled table with one column of ids in code style; nothing when there are no rows."""
    return [f"## {title}", "", table(*_with_code_column(headers, rows, code_column)), ""] if rows else []


def compile_section(lines: list[dict]) -> list[str]:
    tables = summary.compile_tables(lines)
    if not tables:
        return []
    out = ["## Compile-only checks", ""]
    for target, (headers, rows) in tables.items():
        out += [f"### {target}", "", table(headers, rows), ""]
    return out


def configuration_section(lines: list[dict]) -> list[str]:
    """Launch configurations (sweep tiers): per kernel, then per kernel x configuration."""
    headers, rows = configurations.configuration_table(lines)
    if not rows:
        return []
    failing = configurations.failing_configurations(lines)
    return ["## Launch configurations", "", table(*configurations.kernel_totals(lines)), "",
            f"Failing configurations: {', '.join(code(name) for name in failing) if failing else 'none'}.", "",
            table(headers, rows), ""]


def time_section(env: dict, lines: list[dict]) -> list[str]:
    headers, rows = time_breakdown.phase_table(env, lines)
    if not rows:
        return []
    return [f"## {time_breakdown.TITLE}", "", time_breakdown.__doc__.split("\n\n")[1].replace("\n", " "), "",
            table(headers, rows), ""]


def render(env: dict, lines: list[dict]) -> str:
    """The whole Markdown report of one run."""
    parts = ["# Conformance report", "", headline(lines), ""]
    parts += [f"**Merge warning:** {warning}" for warning in env.get("merge_warnings") or []]
    parts += [""] if env.get("merge_warnings") else []
    if env.get("implementation"):
        parts += [f"Implementation: {summary.format_env_value('implementation', env['implementation'])}", ""]
    parts += environment_section(env)
    parts += _optional_section("Implementations", *summary.implementation_table(env, lines), "implementation")
    parts += _optional_section("Cases per GPU", *devices.gpu_table(env, lines), "UUID")
    parts += _optional_section(compile_time.TITLE, *compile_time.compile_time_table(lines), "implementation")
    parts += probe_section(lines)
    parts += ["## Totals", "", table(*summary.totals_table(lines)), ""]
    determinism, conventions = summary.determinism_text(lines, env), declared.convention_sentences(lines)
    parts += [determinism, ""] if determinism else []
    parts += [*(f"Judged as declared: {sentence}" for sentence in conventions), ""] if conventions else []
    parts += problem_section(lines)
    parts += _optional_section("Known issues", *summary.known_issue_table(lines), "example case")
    if summary.of_kind(lines, summary.CASE):
        parts += ["## By operator, direction, dtype, head dim and mask", "", table(*summary.group_table(lines)), ""]
        parts += ["## Worst ratio per tensor", "", table(*_with_code_column(*summary.tensor_table(lines), "case")), ""]
    parts += configuration_section(lines)
    parts += compile_section(lines)
    parts += _optional_section("Unsupported", *summary.unsupported_table(lines), "first")
    parts += time_section(env, lines)
    return "\n".join(parts).rstrip() + "\n"
