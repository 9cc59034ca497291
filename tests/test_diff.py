"""`python -m conformance diff OLD NEW` on copies of recorded runs with planted changes."""

import copy
import math
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.reporting import diff
from conformance.running.results import ResultsWriter, read_env, read_results

H100 = Path(__file__).parent / "data" / "h100_sample"
LINES = read_results(H100)
VICTIM = LINES[3]["case"]


def write_run(folder: Path, lines: list[dict], **env_changes) -> Path:
    writer = ResultsWriter(folder, {**read_env(H100), **env_changes})
    for line in lines:
        writer.append(line)
    writer.close()
    return folder


def planted(case_id: str, **changes) -> list[dict]:
    """LINES with one line's fields changed."""
    lines = copy.deepcopy(LINES)
    next(line for line in lines if line["case"] == case_id).update(changes)
    return lines


def with_ratio(line: dict, tensor_index: int, ratio: float) -> dict:
    changed = copy.deepcopy(line)
    changed["tensors"][tensor_index]["ratio"] = ratio
    return changed


def test_a_planted_regression_exits_1_and_is_named(tmp_path, capsys):
    old = write_run(tmp_path / "old", LINES)
    tensors = [dict(LINES[3]["tensors"][0], ratio=2.5, passed=False)]
    new = write_run(tmp_path / "new", planted(VICTIM, verdict="fail", rule_verdict="fail", tensors=tensors,
                                              worst_ratio=2.5, reason="out ratio 2.5 > 2"), triton="3.7.0")
    assert main(["diff", str(old), str(new)]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if VICTIM in line)
    assert row.split("|")[1].strip() == "regression"
    assert "| pass  | fail  |" in row and "out ratio 2.5 > 2" in row
    assert "regression 1, fixed 0, changed 0" in out and "REGRESSIONS: 1" in out
    assert "| triton  | 3.6.0" in out and "3.7.0" in out  # the runs' fingerprints differ there


def test_identical_runs_exit_0(tmp_path, capsys):
    assert main(["diff", str(H100), str(H100)]) == 0
    assert "No differences." in capsys.readouterr().out


@pytest.mark.parametrize("old, new, expected", [
    ("pass", "fail", "regression"), ("pass", "nonfinite", "regression"), ("xfail", "xpass", "regression"),
    ("unsupported", "error", "regression"), ("fail", "pass", "fixed"), ("error", "xfail", "fixed"),
    ("pass", "unsupported", "changed"), ("fail", "error", "changed"), ("pass", "pass", None)])
def test_classification_of_verdict_changes(old, new, expected):
    assert diff.classify(old, new) == expected


def test_drift_is_absolute_in_ratio_units():
    line = LINES[0]
    base = line["tensors"][0]["ratio"]
    moved = lambda delta: diff.compare([line], [with_ratio(line, 0, base + delta)], drift=0.25)  # noqa: E731
    assert moved(0.2) == []
    (change,) = moved(0.3)
    assert (change.change, change.tensor, change.delta) == ("drift", "out", pytest.approx(0.3))
    (change,) = diff.compare([line], [with_ratio(line, 0, math.inf)])
    assert change.change == "drift" and change.delta == math.inf
    assert diff.compare([with_ratio(line, 0, math.nan)], [with_ratio(line, 0, math.inf)]) == []


def test_compile_resources_drift_relatively():
    check = next(line for line in read_results(Path(__file__).parent / "data" / "report_run")
                 if line["case"].startswith("compile.fwd[cuda"))
    assert diff.compare([check], [dict(check, registers=200)]) == []  # 168 -> 200: +19 %
    (change,) = diff.compare([check], [dict(check, shared_bytes=131072)])  # +33 %
    assert (change.change, change.tensor) == ("drift", "shared_bytes")
    assert diff.change_rows([change])[1][0][-1] == "shared_bytes 98,304 -> 131,072"
    (change,) = diff.compare([check], [dict(check, spills_bytes=64)])  # from none
    assert change.tensor == "spills_bytes" and change.delta == 64


def test_new_removed_and_order(tmp_path):
    removed, added = LINES[0], dict(LINES[1], case=LINES[1]["case"].replace("seed0", "seed1"))
    new_lines = planted(LINES[2]["case"], verdict="error", reason="RuntimeError: boom")[1:] + [added]
    changes = diff.compare(LINES, new_lines)
    assert [(c.change, c.case) for c in changes] == [("regression", LINES[2]["case"]), ("new", added["case"]),
                                                      ("removed", removed["case"])]


def test_markdown_format_and_drift_option(tmp_path, capsys):
    line = LINES[5]
    drifted = [with_ratio(line, 0, line["tensors"][0]["ratio"] + 0.1) if l is line else l for l in LINES]
    new = write_run(tmp_path / "new", drifted)
    assert main(["diff", str(H100), str(new), "--format", "markdown", "--drift", "0.05"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Conformance diff") and "(drift: |new - old| ratio > 0.05," in out
    assert f"| drift    | {line['case']} |" in out and "out +0.1" in out
    assert main(["diff", str(H100), str(new)]) == 0
    assert "No differences." in capsys.readouterr().out


def test_usage_error_without_results(tmp_path, capsys):
    assert main(["diff", str(tmp_path), str(H100)]) == 2
    assert "argument OLD: no results.jsonl" in capsys.readouterr().err
