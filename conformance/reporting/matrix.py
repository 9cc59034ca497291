"""`python -m conformance matrix DIR...`: results lines (grouped) x triton versions.

Each DIR is a run folder (results.jsonl + env.json) or a folder holding run
folders at any depth (e.g. reports/matrix/cpu with triton-*/run and
triton-*/compile). Run folders are columns by the triton version of their
env.json; several run folders of one version (the tier run and the compile
tier) merge into one column. Columns are ordered by version.

Neighbouring columns are compared exactly as `conformance diff` compares two runs
(`diff.compare`): a regression is marked "▼", a fix "▲", any other change of
verdict "~", a drift "≈" (a tensor's ratio, or a compile check's registers,
spills or shared memory; see `diff`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from conformance.judging.rule import RULE_REVISION
from conformance.reporting import diff, html, markdown, summary, terminal
from conformance.reporting.merge import run_folders
from conformance.running.results import read_env, read_results

STATUS_FILE = "status.json"  # written by conformance.robustness.matrix_job beside a version's run folders
MARKERS = diff.MARKERS
_REASON_CHARS = 110


@dataclass
class Column:
    """One triton version: its lines (all run folders merged) and where they came from."""

    version: str
    env: dict
    lines: list[dict] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    exit_codes: dict = field(default_factory=dict)

    def by_id(self) -> dict[str, dict]:
        return {line["case"]: line for line in self.lines}


@dataclass
class Matrix:
    columns: list[Column]
    drift: float = diff.DEFAULT_DRIFT

    def transitions(self) -> list[tuple[Column, Column, list[diff.Change]]]:
        """Each pair of neighbouring versions with the changes from the first to the second.

        A line is compared with its latest earlier version, so a gap (a part that did not
        run for some version) is neither a removal nor an addition after it: `removed`
        are the previous column's ids missing now, `new` the ids never seen before."""
        found, latest = [], {}
        for old, new in zip(self.columns, self.columns[1:]):
            latest.update(old.by_id())
            current = new.by_id()
            baseline = [latest[case] for case in current if case in latest]
            baseline += [line for case, line in old.by_id().items() if case not in current]
            found.append((old, new, diff.compare(baseline, new.lines, self.drift)))
        return found


def _version_key(text: str):
    try:
        return (0, Version(text), text)
    except InvalidVersion:
        return (1, Version("0"), text)


def load_matrix(paths, drift: float = diff.DEFAULT_DRIFT) -> Matrix:
    """Columns per triton version from the run folders under `paths`."""
    columns: dict[str, Column] = {}
    for folder in run_folders(paths):
        env = read_env(folder)
        version = str(env.get("triton") or folder.name)
        column = columns.setdefault(version, Column(version, env))
        column.lines += read_results(folder)
        column.folders.append(folder)
        if env.get("backend") not in column.backends:
            column.backends.append(env.get("backend"))
        status = folder.parent / STATUS_FILE
        if status.exists():
            column.exit_codes.update(json.loads(status.read_text(encoding="utf-8")).get("exit_codes", {}))
    return Matrix([columns[v] for v in sorted(columns, key=_version_key)], drift)


# --- tables ------------------------------------------------------------------------

def group_of(line: dict) -> str:
    """Row group of a line: op.direction dtype for cases, probe, compile target."""
    kind = summary.kind(line)
    if kind == summary.CASE:
        return f"{line.get('op')}.{line.get('direction')} {line.get('dtype')}"
    if kind == summary.COMPILE:
        return f"compile {line.get('target')}"
    return kind


def _counts_cell(lines: list[dict]) -> str:
    if not lines:
        return "-"
    totals = summary.verdict_totals(lines)
    text = ", ".join(f"{count} {verdict}" for verdict, count in totals.items())
    worst = summary.worst(line.get("worst_ratio") for line in lines)
    return text + (f" · {summary.format_ratio(worst)}" if worst is not None else "")


def version_table(matrix: Matrix) -> tuple[list[str], list[list]]:
    rows = []
    for column in matrix.columns:
        env = column.env
        exits = ", ".join(f"{part} {code}" for part, code in column.exit_codes.items()) or "-"
        backends = " + ".join(str(backend) for backend in column.backends)
        rows.append([column.version, backends, env.get("torch", "-"), env.get("numpy", "-"),
                     exits, summary.totals_text(column.lines)])
    return ["triton", "backend", "torch", "numpy", "exit codes", "totals"], rows


def _groups(matrix: Matrix) -> list[str]:
    """Row groups: cases first, then probes, then compile targets (first-seen order within)."""
    rank = {}
    for line in (line for column in matrix.columns for line in column.lines):
        kind = summary.kind(line)
        rank.setdefault(group_of(line), (summary.KINDS.index(kind) if kind in summary.KINDS else len(summary.KINDS),
                                         len(rank)))
    return sorted(rank, key=rank.get)


def group_table(matrix: Matrix) -> tuple[list[str], list[list]]:
    """Rows per group, a column per version: verdict counts and worst ratio, with the
    markers of the group's changes since the previous version."""
    groups = _groups(matrix)
    marks = [Counter()] + [Counter((group_of(c.new or c.old), c.change) for c in changes)
                           for _, _, changes in matrix.transitions()]
    rows = []
    for group in groups:
        row = [group]
        for column, mark in zip(matrix.columns, marks):
            cell = _counts_cell([line for line in column.lines if group_of(line) == group])
            flags = "".join(f"{MARKERS[name]}{mark[(group, name)]}" for name in MARKERS if mark[(group, name)])
            row.append(f"{flags}: {cell}" if flags else cell)
        rows.append(row)
    return ["group", *(column.version for column in matrix.columns)], rows


def transition_table(matrix: Matrix) -> tuple[list[str], list[list]]:
    rows = [[f"{old.version} → {new.version}",
             *(sum(c.change == name for c in changes) for name in diff.CHANGE_ORDER)]
            for old, new, changes in matrix.transitions()]
    return ["versions", *diff.CHANGE_ORDER], rows


def _measure(line: dict) -> str:
    """A line's recorded numbers in a few characters: the worst ratio of a case, the
    max error of a probe, r(egisters) s(hared KiB) sp(illed bytes) of a compile check."""
    if summary.kind(line) == summary.COMPILE:
        parts = [f"r{line['registers']}" if line.get("registers") is not None else "",
                 f"s{line['shared_bytes'] / 1024:.3g}K" if line.get("shared_bytes") is not None else "",
                 f"sp{line['spills_bytes']}" if line.get("spills_bytes") else ""]
        return " ".join(part for part in parts if part)
    if summary.kind(line) == summary.PROBE:
        return f"{line['max_error']:.2g}" if line.get("max_error") is not None else ""
    return summary.format_ratio(line["worst_ratio"]) if line.get("worst_ratio") is not None else ""


def _detail_cell(line: dict | None, change: str | None) -> str:
    if line is None:
        return "-"
    text = " ".join(part for part in (line["verdict"], _measure(line)) if part)
    return f"{MARKERS[change]} {text}" if change in MARKERS else text


def detail_table(matrix: Matrix) -> tuple[list[str], list[list]]:
    """One row per id that regressed, was fixed, changed or drifted somewhere, in group order."""
    changed_at = [{}] + [{c.case: c.change for c in changes if c.change in MARKERS}
                         for _, _, changes in matrix.transitions()]
    ids = list(dict.fromkeys(case for changes in changed_at for case in changes))
    by_id = [column.by_id() for column in matrix.columns]
    some_line = lambda case: next(lines[case] for lines in by_id if case in lines)  # noqa: E731
    order = {group: index for index, group in enumerate(_groups(matrix))}
    ids.sort(key=lambda case: order[group_of(some_line(case))])
    rows = [[case, *(_detail_cell(lines.get(case), marks.get(case)) for lines, marks in zip(by_id, changed_at))]
            for case in ids]
    return ["id", *(column.version for column in matrix.columns)], rows


def reason_table(matrix: Matrix) -> tuple[list[str], list[list]]:
    """Each distinct reason of a line that did not pass: its count per version."""
    counts = [Counter((line["verdict"], summary.one_line(line.get("reason"), _REASON_CHARS))
                      for line in column.lines if line["verdict"] != "pass") for column in matrix.columns]
    reasons = list(dict.fromkeys(key for per_version in counts for key in per_version))
    rows = [[verdict, reason, *(per_version[(verdict, reason)] or "-" for per_version in counts)]
            for verdict, reason in reasons]
    return ["verdict", "reason", *(column.version for column in matrix.columns)], rows


# --- formats -----------------------------------------------------------------------

SECTIONS = (
    ("Versions", version_table),
    ("By group: lines per verdict · worst ratio (▼ regressions, ▲ fixes, ~ other verdict changes, "
     "≈ drift since the previous version)", group_table),
    ("Changes between neighbouring versions", transition_table),
    ("Lines that changed: verdict and worst ratio (cases), max error (probes), registers r, shared memory s "
     "and spilled bytes sp (compile checks)", detail_table),
    ("Reasons of lines that did not pass: lines per version", reason_table),
)


def drift_text(drift: float) -> str:
    """What counts as drift, in words."""
    return (f"Drift: a tensor's ratio moved by more than {drift:g}, or a compile check's registers, spills or "
            f"shared memory by more than {drift:.0%}. Rendered from the run folders' results.jsonl and env.json only.")


def stale_rule_text(matrix: Matrix) -> str | None:
    """A warning naming the columns judged under another revision of the rule than the
    current one (their verdicts and ratios do not compare), or None."""
    stale = [f"triton {column.version} (rule {column.env.get('rule', 'before revision 4')})"
             for column in matrix.columns if column.env.get("rule") != RULE_REVISION]
    if not stale:
        return None
    return f"Stale rule: {', '.join(stale)} judged under an older rule than revision {RULE_REVISION}: re-run them."


def render(matrix: Matrix, fmt: str = "terminal") -> str:
    """The matrix as `terminal`, `markdown` or `html` text."""
    if fmt == "html":
        return _html_page(matrix)
    table = markdown.table if fmt == "markdown" else terminal.grid
    heading = "## " if fmt == "markdown" else ""
    out = ["# Triton version matrix" if fmt == "markdown" else "Triton version matrix", "",
           drift_text(matrix.drift), ""]
    if stale_rule_text(matrix):
        out += [stale_rule_text(matrix), ""]
    for title, build in SECTIONS:
        headers, rows = build(matrix)
        out += [heading + title, "", table(headers, rows) if rows else "None.", ""]
    return "\n".join(out).rstrip() + "\n"


def _html_page(matrix: Matrix) -> str:
    body = [f"<h1>Triton version matrix</h1><p class='note'>{html.escape(drift_text(matrix.drift))}</p>"]
    if stale_rule_text(matrix):
        body.append(f"<p class='note'><strong>{html.escape(stale_rule_text(matrix))}</strong></p>")
    for title, build in SECTIONS:
        headers, rows = build(matrix)
        body.append(html.section(title, html.table(headers, rows, mono=("id", "reason")) if rows else "<p>None.</p>"))
    return html.page("Triton version matrix", body)
