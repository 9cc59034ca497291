"""A run's folder: `results.jsonl` (one line per finished case) and `env.json`.

A published folder may hold its results archived, `results.jsonl.gz` (reports/README.md
says which and why): every reader here takes either, and a run only ever writes the plain file.

Every finished case is appended, flushed and fsynced at once, so a run that dies
half-way (a kernel that crashes the process, a killed CI job) still leaves every
result it produced. Reports are rebuilt from these two files only.

JSON has no infinities or NaN; non-finite floats (a ratio of inf, an error of NaN)
are written as the strings "inf", "-inf" and "nan" and read back as floats.
"""

from __future__ import annotations

import datetime
import gzip
import json
import math
import os
from pathlib import Path

RESULTS_FILE = "results.jsonl"
ARCHIVED_RESULTS_FILE = RESULTS_FILE + ".gz"
ENV_FILE = "env.json"
SUMMARY_FILE = "summary.md"
DEFAULT_RUNS_DIR = Path("reports") / "runs"

_NONFINITE_STRINGS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _encode(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(item) for item in value]
    return value


_NUMERIC_KEYS = {"kernel_err", "torch_err", "floor", "ratio", "worst_ratio", "max_error", "tolerance"}


def _decode(value, key: str | None = None):
    if isinstance(value, dict):
        return {name: _decode(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [_decode(item, key) for item in value]
    if key in _NUMERIC_KEYS and isinstance(value, str) and value in _NONFINITE_STRINGS:
        return _NONFINITE_STRINGS[value]
    return value


def to_json(record: dict) -> str:
    """One record as a single strict-JSON line (no trailing newline)."""
    return json.dumps(_encode(record), allow_nan=False, sort_keys=False)


def from_json(text: str) -> dict:
    """Inverse of `to_json`."""
    return _decode(json.loads(text))


def default_run_dir(backend_key: str, now: datetime.datetime | None = None) -> Path:
    """reports/runs/<UTC yyyymmdd-HHMMSS>-<backend key, ':' replaced by '-'>."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return DEFAULT_RUNS_DIR / f"{now:%Y%m%d-%H%M%S}-{backend_key.replace(':', '-')}"


class JsonLinesWriter:
    """Appends JSON lines to one file, each durable (flushed, fsynced) before `append`
    returns; with `append=True` it continues an existing file after its last whole line."""

    def __init__(self, path: str | Path, append: bool = False):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if append:
            drop_torn_tail(path)
        self._handle = open(path, "a" if append else "w", encoding="utf-8")
        self.count = 0

    def append(self, line: dict) -> None:
        """Append one line and make it durable before returning."""
        self._handle.write(to_json(line) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self.count += 1

    def close(self) -> None:
        self._handle.close()


class ResultsWriter(JsonLinesWriter):
    """Writes one run's folder: env.json, and a fresh results.jsonl or (`append`, resuming
    a run) the existing one continued."""

    def __init__(self, run_dir: str | Path, env: dict, append: bool = False):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_env(self.run_dir, env)
        super().__init__(self.run_dir / RESULTS_FILE, append)


def drop_torn_tail(path: Path) -> None:
    """Cut a results file after its last newline: a line torn by a crash mid-write
    would otherwise sit in the middle of the file once more lines are appended."""
    if not path.exists():
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if data and not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)


def write_env(run_dir: str | Path, env: dict) -> Path:
    path = Path(run_dir) / ENV_FILE
    path.write_text(json.dumps(_encode(env), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


def read_env(run_dir: str | Path) -> dict:
    """env.json of a run ({} when it is missing)."""
    path = Path(run_dir) / ENV_FILE
    if not path.exists():
        return {}
    return _decode(json.loads(path.read_text(encoding="utf-8")))


def results_file(run_dir: str | Path) -> Path | None:
    """The folder's results.jsonl, or its archived results.jsonl.gz, or None."""
    for name in (RESULTS_FILE, ARCHIVED_RESULTS_FILE):
        if (Path(run_dir) / name).exists():
            return Path(run_dir) / name
    return None


def folders_with_results(root: str | Path, pattern: str = "**") -> list[Path]:
    """Folders matching `pattern` below `root` (glob; "**": every depth) that hold results,
    plain or archived, in path order."""
    found = {path.parent for name in (RESULTS_FILE, ARCHIVED_RESULTS_FILE)
             for path in Path(root).glob(f"{pattern}/{name}")}
    return sorted(found)


def read_json_lines(path: str | Path) -> list[dict]:
    """The lines of a JSON-lines file (gzip-compressed where its name ends in .gz) in order; a
    torn last line (a crash mid-write) is skipped, any other malformed line raises ValueError."""
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = data.decode("utf-8").splitlines()
    records = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            records.append(from_json(text))
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a JSON line: {exc}") from None
    return records


def read_results(run_dir: str | Path) -> list[dict]:
    """The lines of a run folder's results.jsonl, or its archive (see read_json_lines)."""
    return read_json_lines(results_file(run_dir) or Path(run_dir) / RESULTS_FILE)
