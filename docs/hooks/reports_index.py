"""The index of the published reports, generated from the reports themselves.

Every run folder under reports/ holds the env.json fingerprint its run wrote: what
ran (`command`), where (`device`, `backend`, `gpus`, `torch`, `triton`), at which
harness revision and when. This module reads those files, counts the verdicts of
each folder's results (results.jsonl, gzipped or not; mutants.jsonl) and renders one
table per group of folders, so the index says only what the folders say. What a
run was for, in words, is the README.md of its folder (or of the nearest folder
above it), written when the run was published and linked from its row.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
# The page of a run folder a reader opens first, in order of preference.
MAIN_PAGES = ("summary.md", "compile.md", "mutants.md", "flake-scales.md", "flake.md", "matrix.md", "benchmark.md")
RESULTS = ("results.jsonl", "results.jsonl.gz", "mutants.jsonl")
# Files of a report folder that the site serves beside its pages.
SERVED_SUFFIXES = (".md", ".svg", ".html")
VERDICT_ORDER = ("pass", "fail", "nonfinite", "error", "xfail", "xpass", "unsupported")


@dataclass(frozen=True)
class Run:
    """One published run folder, as its own files describe it."""

    folder: Path  # relative to reports/
    env: dict
    verdicts: Counter
    main_page: str | None  # file name in the folder
    about: Path | None  # README.md of the folder or the nearest one above it, relative to reports/

    @property
    def group(self) -> str:
        return self.folder.parts[0]


def _read_lines(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def verdict_counts(folder: Path) -> Counter:
    """Verdicts of the cases (probes left out) or mutants the folder recorded."""
    for name in RESULTS:
        if (folder / name).exists():
            lines = _read_lines(folder / name)
            return Counter(line.get("verdict", "?") for line in lines if line.get("kind") != "probe")
    return Counter()


def _about(folder: Path, reports: Path) -> Path | None:
    for candidate in (folder, *folder.parents):
        if candidate == reports or reports not in candidate.parents:
            return None
        if (candidate / "README.md").exists():
            return (candidate / "README.md").relative_to(reports)
    return None


def find_runs(reports: Path = REPORTS) -> list[Run]:
    runs = []
    for env_file in sorted(reports.rglob("env.json")):
        folder = env_file.parent
        if "runs" in folder.relative_to(reports).parts[:1]:  # unpublished local runs
            continue
        env = json.loads(env_file.read_text(encoding="utf-8"))
        main = next((name for name in MAIN_PAGES if (folder / name).exists()), None)
        runs.append(Run(folder.relative_to(reports), env, verdict_counts(folder), main, _about(folder, reports)))
    return runs


def where(env: dict) -> str:
    """The machine in words, saying plainly when no GPU ran the kernels."""
    backend = str(env.get("backend") or "")
    software = f"torch {env.get('torch')}, triton {env.get('triton')}"
    if env.get("tier") == "compile":
        return f"CPU, compile only (no GPU) for {backend.replace(',', ', ')}; {software}"
    if backend.startswith("interpreter"):
        return f"Triton's CPU interpreter (no GPU); {software}"
    gpus = env.get("gpus") or []
    count = f"{len(gpus)} × " if len(gpus) > 1 else ""
    return f"{count}{env.get('device')} (`{backend}`), driver {env.get('driver')}; {software}"


def revision(env: dict) -> str:
    harness = env.get("harness") or {}
    rev = str(harness.get("revision") or "unknown")[:7]
    return f"{rev} (uncommitted changes)" if harness.get("dirty") else rev


def verdict_text(verdicts: Counter) -> str:
    if not verdicts:
        return "—"
    known = [f"{verdicts[v]} {v}" for v in VERDICT_ORDER if verdicts[v]]
    other = [f"{n} {v}" for v, n in sorted(verdicts.items()) if v not in VERDICT_ORDER]
    return ", ".join(known + other)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _row(run: Run) -> str:
    folder = run.folder.as_posix()
    name = f"[`{folder}/`]({folder}/{run.main_page})" if run.main_page else f"`{folder}/`"
    about = f"[about]({run.about.as_posix()})" if run.about else "—"
    date = str(run.env.get("time_utc") or "")[:10]
    return (f"| {name} | `{_cell(run.env.get('command') or '—')}` | {verdict_text(run.verdicts)} | "
            f"{_cell(where(run.env))} | {revision(run.env)}, {date} | {about} |")


def render(reports: Path = REPORTS) -> str:
    """The index page, as markdown; links are relative to reports/ (the page sits there)."""
    runs = find_runs(reports)
    hardware = sorted({run.env.get("device") for run in runs if run.env.get("gpus")})
    lines = ["# Published reports", "",
             f"{len(runs)} run folders under `reports/`, each listed from its own `env.json` "
             "(generated at every build: nothing here is typed by hand). Runs on hardware: "
             f"{', '.join(hardware) or 'none'}. Every other row ran without a GPU (the CPU "
             "interpreter, or the compile-only tier) and says so. AMD and Iluvatar cards, and "
             "NVIDIA architectures other than these, have not run here: nothing is claimed for them.", "",
             "Each folder holds `env.json` and its results; its page (the folder link) is the "
             "report rendered from them, and *about* is the note written when it was published.", ""]
    for group in sorted({run.group for run in runs}):
        lines += [f"## {group}", "", "| folder | command | verdicts | where | revision, date | about |",
                  "|---|---|---|---|---|---|"]
        lines += [_row(run) for run in runs if run.group == group]
        lines.append("")
    return "\n".join(lines)


def served_files(reports: Path = REPORTS) -> list[Path]:
    """Files of the report folders the site serves (their pages, plots and HTML reports)."""
    return sorted(path for path in reports.rglob("*") if path.is_file() and path.suffix in SERVED_SUFFIXES
                  and "runs" not in path.relative_to(reports).parts[:1] and path != reports / "README.md")


if __name__ == "__main__":  # python docs/hooks/reports_index.py > /tmp/reports.md
    os.chdir(ROOT)
    print(render(), end="")
