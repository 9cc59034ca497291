"""Reports rendered from a hand-written run folder (tests/data/report_run), and the
results-file reader/writer they depend on."""

import json
import math
import shutil
from pathlib import Path

import pytest

from conformance.report import group_table, markdown_report, render_run, tensor_table, terminal_report, verdict_totals
from conformance.results import ResultsWriter, from_json, read_env, read_results, to_json

FIXTURE = Path(__file__).parent / "data" / "report_run"


@pytest.fixture
def run_dir(tmp_path):
    target = tmp_path / "run"
    shutil.copytree(FIXTURE, target)
    return target


@pytest.fixture
def lines():
    return read_results(FIXTURE)


@pytest.fixture
def summary(lines):
    return markdown_report(read_env(FIXTURE), lines)


def test_fixture_reads_back_with_infinities(lines):
    assert len(lines) == 10
    nonfinite = next(line for line in lines if line["verdict"] == "nonfinite")
    assert nonfinite["worst_ratio"] == math.inf and nonfinite["tensors"][0]["kernel_err"] == math.inf


def test_totals(lines):
    assert verdict_totals(lines) == {"pass": 3, "fail": 1, "nonfinite": 1, "error": 1, "xpass": 1,
                                     "xfail": 1, "unsupported": 2}


def test_group_table_counts_and_worst_ratio(lines):
    headers, rows = group_table(lines)
    assert headers == ["op", "dir", "dtype", "D", "mask", "pass", "fail", "nonfinite", "error", "xpass",
                       "xfail", "unsupported", "worst ratio"]
    by_key = {tuple(row[:5]): dict(zip(headers, row)) for row in rows}
    failing = by_key[("flash_attention", "bwd", "bf16", 128, "causal")]
    assert (failing["fail"], failing["pass"], failing["worst ratio"]) == (1, "", "2.72")
    assert by_key[("flash_attention", "fwd", "bf16", 128, "noncausal")]["worst ratio"] == "inf"
    # fwd rows before bwd rows, fp16 before bf16 before fp32
    assert [row[1] for row in rows] == sorted((row[1] for row in rows), key=["fwd", "bwd"].index)


def test_tensor_table_names_the_worst_case(lines):
    rows = {row[0]: row for row in tensor_table(lines)[1]}
    assert rows["dk"][1:3] == [4, "3.14"]
    assert "Sq128,Sk128" in rows["dk"][3]
    assert rows["out"][2] == "inf"


def test_summary_sections_in_order(summary):
    headings = [line for line in summary.splitlines() if line.startswith("## ")]
    assert headings == ["## Environment", "## Totals", "## By operator, direction, dtype, head dim and mask",
                        "## Worst ratio per tensor", "## Not passing (fail, nonfinite, error, xpass)",
                        "## Known issues (xfail)", "## Unsupported"]


def test_summary_lists_problems_first_with_reproducers(summary):
    problems = summary.split("## Not passing")[1].split("## Known issues")[0]
    verdicts_in_order = [line.split(":")[0][4:] for line in problems.splitlines() if line.startswith("### ")]
    assert verdicts_in_order == ["fail", "nonfinite", "error", "xpass"]
    assert problems.count("Reproduce: `python -m conformance run --case '") == 4
    assert "out of resource: shared memory" in problems and "Traceback" in problems
    assert "| dk       | 6.250e-02    | 1.950e-02   | 2.300e-02 | 2.72    |" in problems
    assert "no longer fails" in problems


def test_summary_environment_xfail_and_unsupported(summary):
    assert "| device         | NVIDIA H100 80GB HBM3" in summary
    assert "0f3c2a9d41b7e8c6a5d4f3e2b1a0c9d8e7f6a5b4" in summary and "(dirty)" not in summary
    assert "| triton         | 3.6.0" in summary
    assert "sm90-bf16-d16-dkdv" in summary.split("## Known issues (xfail)")[1]
    unsupported = summary.split("## Unsupported")[1]
    assert "dtype fp32 not supported on cuda:sm_90 (supported: fp16, bf16) | 2" in unsupported


def test_terminal_report(lines):
    text = terminal_report(read_env(FIXTURE), lines)
    assert text.startswith("Conformance on cuda:sm_90 (NVIDIA H100 80GB HBM3): 10 cases: pass 3, fail 1,")
    assert text.index("FAIL ") < text.index("NONFINITE ") < text.index("ERROR ") < text.index("XPASS ")
    assert text.count("reproduce: python -m conformance run") == 4


def test_render_run_writes_summary_from_the_files_only(run_dir):
    text = render_run(run_dir)
    written = (run_dir / "summary.md").read_text()
    assert written == markdown_report(read_env(run_dir), read_results(run_dir))
    assert "summary.md" in text


def test_a_torn_last_line_is_ignored_but_other_garbage_is_not(run_dir):
    results = run_dir / "results.jsonl"
    with results.open("a") as handle:
        handle.write('{"case": "flash_attention.fwd[')
    assert len(read_results(run_dir)) == 10
    results.write_text("not json\n" + FIXTURE.joinpath("results.jsonl").read_text())
    with pytest.raises(ValueError, match="results.jsonl:1"):
        read_results(run_dir)


def test_writer_appends_strict_json_lines(tmp_path):
    writer = ResultsWriter(tmp_path / "new", {"backend": "interpreter:cpu"})
    writer.append({"case": "a", "worst_ratio": math.inf, "tensors": [{"name": "out", "ratio": math.nan}]})
    writer.append({"case": "b", "worst_ratio": 1.5, "tensors": []})
    writer.close()
    raw = (tmp_path / "new" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["case"] for line in raw] == ["a", "b"]  # strict JSON parsers accept it
    first = read_results(tmp_path / "new")[0]
    assert first["worst_ratio"] == math.inf and math.isnan(first["tensors"][0]["ratio"])
    assert read_env(tmp_path / "new") == {"backend": "interpreter:cpu"}


def test_only_numeric_fields_decode_special_strings():
    assert from_json(to_json({"reason": "inf", "ratio": -math.inf})) == {"reason": "inf", "ratio": -math.inf}
