"""Reports of a run folder, rendered from its results.jsonl and env.json only.

Nothing here recomputes a number: every count, ratio and command comes from the
results lines, so a report can be rebuilt (`python -m conformance report DIR`) on
any machine, long after the run. The formats live in `conformance.reporting`.

    render(run_dir, fmt)    the text of one format (FORMATS)
    write_reports(run_dir)  summary.md, report.html and junit.xml into the folder
    render_run(run_dir)     write_reports + the terminal report (end of every run)
"""

from __future__ import annotations

from pathlib import Path

from conformance.diagnosing.shrink_command import attach_shrunk
from conformance.reporting import html, junit, markdown, terminal
from conformance.reporting.summary import format_ratio
from conformance.running.results import ResultsWriter, SUMMARY_FILE, read_env, read_results, to_json

__all__ = ["FILES", "FORMATS", "format_ratio", "jsonl", "render", "render_run", "write_reports", "write_run"]


def jsonl(env: dict, lines: list[dict]) -> str:
    """The results lines, normalised: one strict-JSON object per line."""
    return "".join(to_json(line) + "\n" for line in lines)


FORMATS = {"terminal": terminal.render, "markdown": markdown.render, "html": html.render,
           "junit": junit.render, "jsonl": jsonl}
# Formats written into the run folder at the end of every run, by file name.
FILES = {"markdown": SUMMARY_FILE, "html": "report.html", "junit": "junit.xml"}


def _lines(run_dir: str | Path) -> list[dict]:
    """The results lines, with the smallest failing cases of `report --shrink` attached."""
    return attach_shrunk(run_dir, read_results(run_dir))


def render(run_dir: str | Path, fmt: str) -> str:
    """One format of a run folder's report."""
    return FORMATS[fmt](read_env(run_dir), _lines(run_dir))


def write_reports(run_dir: str | Path) -> list[Path]:
    """(Re)write summary.md, report.html and junit.xml of a run folder; their paths."""
    run_dir = Path(run_dir)
    env, lines = read_env(run_dir), _lines(run_dir)
    written = []
    for fmt, name in FILES.items():
        path = run_dir / name
        path.write_text(FORMATS[fmt](env, lines), encoding="utf-8")
        written.append(path)
    return written


def write_run(run_dir: str | Path, env: dict, lines: list[dict]) -> Path:
    """A run folder made from given results (a merge of shards): env.json and results.jsonl."""
    writer = ResultsWriter(run_dir, env)
    for line in lines:
        writer.append(line)
    writer.close()
    return Path(run_dir)


def render_run(run_dir: str | Path) -> str:
    """Write the report files of a run folder and return its terminal report."""
    run_dir = Path(run_dir)
    written = write_reports(run_dir)
    return render(run_dir, "terminal") + "\nreports: " + ", ".join(str(path) for path in written) + "\n"
