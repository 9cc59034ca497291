"""The harness's own throughput, next to the kernels' in the benchmark report.

A conformance run folder (`python -m conformance run --tier standard --out DIR`) holds
one results line per case with its `duration_s` and env.json with the run's wall time
(`timing`); runs from before that was recorded have it in `run.log`, where they were
logged with `tee`/redirection as the device sessions do (pytest's closing line,
"650 passed, 8 xfailed in 351.94s").  `summarise(DIR)` turns those into cases, wall
time and cases per second; `flash_benchmark.py --harness-run DIR` stores the summary in
the benchmark folder (HARNESS_FILE), so that `--render` keeps it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conformance.reporting import summary

HARNESS_FILE = "harness.json"
_PYTEST_WALL = re.compile(r"=+ .* in ([0-9.]+)s")


def summarise(run_dir) -> dict:
    """{run, tier, harness, device, cases, case_s, wall_s (None without run.log), cases_per_s}."""
    run_dir = Path(run_dir)
    results, env = run_dir / "results.jsonl", run_dir / "env.json"
    if not results.exists() or not env.exists():
        raise FileNotFoundError(f"--harness-run: {run_dir} is not a conformance run folder "
                                f"(expected results.jsonl and env.json)")
    lines = [json.loads(text) for text in results.read_text(encoding="utf-8").splitlines() if text.strip()]
    cases = [line for line in lines if line.get("kind", "case") == "case"]
    environment = json.loads(env.read_text(encoding="utf-8"))
    # the run's own record (env.json's timing, conformance.reporting.time_breakdown); older runs: pytest's log
    wall = (environment.get("timing") or {}).get("wall_s") or _pytest_wall_seconds(run_dir / "run.log")
    case_seconds = sum(line.get("duration_s") or 0.0 for line in cases)
    harness = summary.format_env_value("harness", environment["harness"]) if environment.get("harness") else None
    return {"run": run_dir.name, "tier": environment.get("tier"), "harness": harness,
            "device": environment.get("device"), "cases": len(cases), "case_s": round(case_seconds, 1),
            "wall_s": wall, "cases_per_s": round(len(cases) / (wall or case_seconds), 2)
            if cases and (wall or case_seconds) else None}


def _pytest_wall_seconds(log: Path) -> float | None:
    if not log.exists():
        return None
    matches = _PYTEST_WALL.findall(log.read_text(encoding="utf-8", errors="replace"))
    return float(matches[-1]) if matches else None


def store(benchmark_dir, summary: dict) -> Path:
    path = Path(benchmark_dir) / HARNESS_FILE
    path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return path


def load(benchmark_dir) -> dict | None:
    path = Path(benchmark_dir) / HARNESS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def markdown_lines(throughput: dict) -> list[str]:
    """The report's section on the harness's own speed."""
    timed = throughput.get("wall_s") is not None
    wall = f"{throughput['wall_s']:g} s of wall time" if timed else "wall time not logged"
    rate = "n/a" if throughput.get("cases_per_s") is None else f"{throughput['cases_per_s']:g}"
    return ["## Harness throughput", "",
            f"The `{throughput.get('tier')}` tier on {throughput.get('device')} (harness "
            f"{throughput.get('harness')}, run folder `{throughput.get('run')}`): {throughput['cases']} cases, "
            f"{wall}, {throughput['case_s']:g} s of case time; {rate} cases per second "
            f"({'by wall time' if timed else 'by case time'}).", ""]
