"""Reports rendered from recorded run folders, and the results-file reader/writer.

tests/data/report_run: a hand-written run with every verdict, two primitive
probes (one failing, blamed by a failing case's `backend_fault`) and three
compile checks. tests/data/h100_sample: 30 real lines of the H100 standard run
(the worst case of each direction x dtype x head dim, and every fwd fp16 d64
causal case).
"""

import json
import math
import shutil
from pathlib import Path

import pytest

from conformance.reporting import junit, markdown, terminal
from conformance.reporting.report import FILES, render, render_run, write_reports
from conformance.reporting.summary import (compile_tables, group_table, probe_table, tensor_table, totals_table,
                                           verdict_totals)
from conformance.running.results import ResultsWriter, from_json, read_env, read_results, to_json

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "report_run"
H100 = DATA / "h100_sample"


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
    return markdown.render(read_env(FIXTURE), lines)


def test_fixture_reads_back_with_infinities(lines):
    assert len(lines) == 15
    nonfinite = next(line for line in lines if line["verdict"] == "nonfinite")
    assert nonfinite["worst_ratio"] == math.inf and nonfinite["tensors"][0]["kernel_err"] == math.inf


def test_totals_count_every_kind_alike(lines):
    assert verdict_totals(lines) == {"pass": 5, "fail": 3, "nonfinite": 1, "error": 2, "xpass": 1,
                                     "xfail": 1, "unsupported": 2}
    headers, rows = totals_table(lines)
    assert headers == ["verdict", "cases", "probes", "compile", "all"]
    assert dict((row[0], row[1:]) for row in rows)["fail"] == [1, 1, 1, 3]


def test_group_table_counts_worst_and_median(lines):
    headers, rows = group_table(lines)
    assert headers == ["op", "dir", "dtype", "D", "mask", "pass", "fail", "nonfinite", "error", "xpass",
                       "xfail", "unsupported", "worst ratio", "median ratio"]
    by_key = {tuple(row[:5]): dict(zip(headers, row)) for row in rows}
    failing = by_key[("flash_attention", "bwd", "bf16", 128, "causal")]
    assert (failing["fail"], failing["pass"], failing["worst ratio"]) == (1, "", "2.72")
    assert by_key[("flash_attention", "fwd", "bf16", 128, "noncausal")]["worst ratio"] == "inf"
    # fwd rows before bwd rows; probes and compile checks are not cases
    assert [row[1] for row in rows] == sorted((row[1] for row in rows), key=["fwd", "bwd"].index)
    assert sum(int(row[5] or 0) for row in rows) == 3


def test_median_is_over_the_recorded_worst_ratios():
    headers, rows = group_table(read_results(H100))
    row = next(dict(zip(headers, r)) for r in rows if r[:5] == ["flash_attention", "fwd", "fp16", 64, "causal"])
    group = ("fwd", "fp16", 64, True)
    ratios = sorted(line["worst_ratio"] for line in read_results(H100)
                    if (line["direction"], line["dtype"], line["head_dim"], line["causal"]) == group)
    assert row["worst ratio"] == f"{ratios[-1]:.3g}"
    middle = len(ratios) // 2
    expected = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    assert row["median ratio"] == f"{expected:.3g}"


def test_tensor_table_names_the_worst_case(lines):
    rows = {row[0]: row for row in tensor_table(lines)[1]}
    assert rows["dk"][1:3] == [4, "3.14"]
    assert "Sq128,Sk128" in rows["dk"][3]
    assert rows["out"][2] == "inf"


def test_probe_section_with_reproducers_of_failing_probes(summary):
    probes = summary.split("## Primitive probes")[1].split("## Totals")[0]
    assert "Probes do not fail a run" in probes
    assert "| probe.dot[bf16] | bf16 tl.dot | fail      | 1.200e+10   |" in probes
    assert probes.count("* `python -m conformance probes --probe") == 1  # the failing one only


def test_probe_and_compile_tables(lines):
    headers, rows = probe_table(lines)
    assert [row[0] for row in rows] == ["probe.dot[fp16]", "probe.dot[bf16]"]
    assert dict(zip(headers, rows[1]))["max error"] == "1.200e+10"
    tables = compile_tables(lines)
    assert list(tables) == ["cuda:sm_90", "hip:gfx942"]
    failing = dict(zip(*[tables["cuda:sm_90"][0], tables["cuda:sm_90"][1][1]]))
    assert (failing["verdict"], failing["shared B"], failing["limit B"]) == ("fail", "262,144", "232,448")
    error = dict(zip(tables["hip:gfx942"][0], tables["hip:gfx942"][1][0]))
    assert error["reason"] == "CompilationError: at 12:4: unsupported layout conversion"  # colour codes gone


def test_summary_sections_in_order(summary):
    headings = [line for line in summary.splitlines() if line.startswith("## ")]
    assert headings == ["## Environment", "## Primitive probes", "## Totals",
                        "## Not passing (fail, nonfinite, error, xpass)", "## Known issues",
                        "## By operator, direction, dtype, head dim and mask", "## Worst ratio per tensor",
                        "## Compile-only checks", "## Unsupported"]


def test_summary_lists_problems_first_with_reproducers(summary):
    problems = summary.split("## Not passing")[1].split("## Known issues")[0]
    verdicts_in_order = [line.split(":")[0][4:] for line in problems.splitlines() if line.startswith("### ")]
    # cases and compile checks; a failing probe informs (its own section), it does not fail a run
    assert verdicts_in_order == ["fail", "fail", "nonfinite", "error", "error", "xpass"]
    assert problems.count("Reproduce: `python -m conformance run --case '") == 4
    assert "probe.dot" not in problems
    assert "out of resource: shared memory" in problems and "Traceback" in problems
    assert "| dk       | 6.250e-02    | 1.950e-02   | 2.300e-02 | 2.72    |" in problems
    assert "no longer fails" in problems
    assert "**likely backend fault: bf16 tl.dot**" in problems


def test_summary_environment_known_issues_and_unsupported(summary):
    assert "| device         | NVIDIA H100 80GB HBM3" in summary
    assert "0f3c2a9d41b7e8c6a5d4f3e2b1a0c9d8e7f6a5b4" in summary and "(dirty)" not in summary
    assert "| triton         | 3.6.0" in summary
    issues = summary.split("## Known issues")[1].split("##")[0]
    assert "| sm90-bf16-d16-dkdv | bf16 dK/dV at head_dim 16 over the bound on sm_90 |" in issues
    assert "| 1       | 1       |" in issues  # one xfail, one xpass
    unsupported = summary.split("## Unsupported")[1]
    assert "dtype fp32 not supported on cuda:sm_90 (supported: fp16, bf16) | 2" in unsupported


def test_a_long_environment_value_is_cut_in_the_summary_but_whole_elsewhere(lines):
    """A command naming a hundred cases would widen every row of summary.md's environment
    table to its length: cut there, saying so; JUnit's properties and env.json keep it."""
    env = {**read_env(FIXTURE), "command": "python -m conformance run " + " ".join(
        f"'--case=flash_attention.fwd[fp16,d64,causal,B2,H8,Hkv2,Sq{n},Sk{n},seed0]'" for n in range(100))}
    table = markdown.render(env, lines).split("## Environment")[1].split("##")[0]
    rows = [row for row in table.splitlines() if row.startswith("|")]
    assert max(map(len, rows)) < 400
    command = next(row for row in rows if row.startswith("| command"))
    assert f"… ({len(env['command']):,} characters; env.json holds it whole)" in command
    assert command.split("| ")[2].startswith(env["command"][:markdown.ENV_VALUE_CHARS])
    assert len(env["command"]) > 5000 and env["command"] in "".join(junit.render(env, lines).splitlines())


def test_terminal_report(lines):
    text = terminal.render(read_env(FIXTURE), lines)
    assert text.startswith("Conformance on cuda:sm_90 (NVIDIA H100 80GB HBM3): 10 cases: pass 3, fail 1,")
    assert "2 probes: pass 1, fail 1; 3 compile checks: pass 1, fail 1, error 1" in text.splitlines()[0]
    assert text.index("FAIL ") < text.index("NONFINITE ") < text.index("ERROR ") < text.index("XPASS ")
    assert text.count("reproduce: python -m conformance run") == 4
    assert "likely backend fault: bf16 tl.dot" in text
    assert "| cuda:sm_90 | 1      | 1      |" in text  # compile overview per target
    assert "\x1b" not in text


def test_render_run_writes_every_file_from_the_files_only(run_dir):
    text = render_run(run_dir)
    env, lines = read_env(run_dir), read_results(run_dir)
    assert (run_dir / "summary.md").read_text() == markdown.render(env, lines)
    assert sorted(path.name for path in run_dir.iterdir()) == sorted(["env.json", "results.jsonl", *FILES.values()])
    assert "summary.md" in text and "report.html" in text and "junit.xml" in text


def test_jsonl_format_is_the_lines_normalised(run_dir):
    """The file's own lines, parsed by the standard json module (not by the harness's
    reader), are what the format prints: a torn last line dropped, nothing else changed."""
    raw = (run_dir / "results.jsonl").read_text().splitlines()
    with (run_dir / "results.jsonl").open("a") as handle:
        handle.write('{"case": "flash_attention.fwd[')  # a crash mid-write
    text = render(run_dir, "jsonl")
    assert [json.loads(line) for line in text.splitlines()] == [json.loads(line) for line in raw if line.strip()]


def test_reports_of_the_real_h100_sample(tmp_path):
    shutil.copytree(H100, tmp_path / "h100")
    written = write_reports(tmp_path / "h100")
    assert [path.name for path in written] == ["summary.md", "report.html", "junit.xml"]
    summary = (tmp_path / "h100" / "summary.md").read_text()
    assert summary.startswith("# Conformance report\n\n30 cases: pass 30.")
    row = "| flash_attention | fwd   | fp32    | 128 | causal    | 1      | 1.81          | 1.81           |"
    assert row in summary


def test_a_torn_last_line_is_ignored_but_other_garbage_is_not(run_dir):
    results = run_dir / "results.jsonl"
    with results.open("a") as handle:
        handle.write('{"case": "flash_attention.fwd[')
    assert len(read_results(run_dir)) == 15
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


def test_a_stated_revision_wins_over_a_stale_checkout(monkeypatch):
    """A copy shipped to a lab machine may carry an old .git: the sender's statement wins,
    the checkout's own view is kept beside it, and the summary marks it as stated."""
    from conformance.reporting.summary import format_env_value
    from conformance.running.environment import git_revision

    monkeypatch.setenv("FA_HARNESS_REVISION", "b31559c")
    harness = git_revision()
    assert harness["revision"] == "b31559c" and harness["stated"] is True
    assert set(harness["checkout"]) == {"revision", "dirty"}
    assert format_env_value("harness", harness) == "b31559c (stated)"
    monkeypatch.delenv("FA_HARNESS_REVISION")
    assert "stated" not in git_revision()


def test_an_archived_results_file_is_read_like_the_plain_one(tmp_path):
    """Published folders may hold results.jsonl.gz (reports/README.md): reading, finding and
    rendering a folder take it as they take results.jsonl."""
    import gzip
    import shutil

    from conformance.reporting.merge import run_folders
    from conformance.running.results import RESULTS_FILE, read_results, results_file

    plain = tmp_path / "runs" / "plain"
    plain.mkdir(parents=True)
    (plain / RESULTS_FILE).write_text('{"case": "a", "verdict": "pass"}\n{"case": "b", "verd')
    archived = tmp_path / "runs" / "archived"
    archived.mkdir()
    (archived / (RESULTS_FILE + ".gz")).write_bytes(gzip.compress((plain / RESULTS_FILE).read_bytes()))
    shutil.copy(plain / RESULTS_FILE, tmp_path / "elsewhere.jsonl")
    assert read_results(archived) == read_results(plain) == [{"case": "a", "verdict": "pass"}]
    assert results_file(archived).name == "results.jsonl.gz" and results_file(tmp_path) is None
    assert run_folders([tmp_path / "runs"]) == [archived, plain]
