"""`python -m conformance matrix` over small run folders built from recorded lines:
columns by triton version, merged run folders, regressions between neighbours."""

import copy
import re
from pathlib import Path

import pytest
from packaging.version import Version

from conformance.cli import main
from conformance.reporting import matrix
from conformance.running.results import ResultsWriter, read_env, read_results

DATA = Path(__file__).parent / "data"
CASES = read_results(DATA / "h100_sample")[:6]
PROBE_AND_COMPILE = [line for line in read_results(DATA / "report_run") if line.get("kind")][:3]
BROKEN, DRIFTING = CASES[1]["case"], CASES[2]["case"]


def write_run(folder: Path, triton: str, lines: list[dict]) -> None:
    writer = ResultsWriter(folder, {**read_env(DATA / "h100_sample"), "triton": triton})
    for line in lines:
        writer.append(line)
    writer.close()


def changed(lines, case_id, **fields):
    lines = copy.deepcopy(lines)
    next(line for line in lines if line["case"] == case_id).update(fields)
    return lines


@pytest.fixture
def root(tmp_path):
    """triton 3.9.0 breaks one case that 3.10.0 fixes again; 3.10.0 moves another's ratio."""
    root = tmp_path / "cpu"
    write_run(root / "triton-3.10.0" / "run", "3.10.0",
              changed(CASES, DRIFTING, tensors=[dict(CASES[2]["tensors"][0], ratio=1.9)], worst_ratio=1.9))
    write_run(root / "triton-3.9.0" / "run", "3.9.0",
              changed(CASES, BROKEN, verdict="error", worst_ratio=None, tensors=[],
                      reason="CompilationError: Block pointers have been removed"))
    write_run(root / "triton-3.9.0" / "compile", "3.9.0", PROBE_AND_COMPILE)
    write_run(root / "triton-3.8.0" / "run", "3.8.0", CASES)
    return root


def test_columns_are_versions_in_version_order_with_run_folders_merged(root):
    loaded = matrix.load_matrix([root])
    assert [column.version for column in loaded.columns] == ["3.8.0", "3.9.0", "3.10.0"]
    assert [len(column.lines) for column in loaded.columns] == [6, 9, 6]
    assert len(loaded.columns[1].folders) == 2


def test_transitions_mark_regressions_fixes_and_drift(root):
    (_, _, first), (_, _, second) = matrix.load_matrix([root]).transitions()
    assert [(c.change, c.case) for c in first if c.change != "new"] == [("regression", BROKEN)]
    assert {(c.change, c.case) for c in second if c.change != "removed"} == {("fixed", BROKEN), ("drift", DRIFTING)}
    headers, rows = matrix.transition_table(matrix.load_matrix([root]))
    assert rows[0][:3] == ["3.8.0 → 3.9.0", 1, 0] and rows[1][:3] == ["3.9.0 → 3.10.0", 0, 1]


def test_a_gap_compares_with_the_latest_earlier_version(root, tmp_path):
    gap = tmp_path / "gap"
    write_run(gap / "a" / "compile", "3.8.0", PROBE_AND_COMPILE)
    write_run(gap / "b" / "run", "3.9.0", CASES)  # its compile part did not run
    probe = PROBE_AND_COMPILE[0]["case"]
    write_run(gap / "c" / "compile", "3.10.0", changed(PROBE_AND_COMPILE, probe, verdict="fail"))
    (_, _, first), (_, _, second) = matrix.load_matrix([gap]).transitions()
    assert {c.change for c in first} == {"new", "removed"}
    assert {(c.change, c.case) for c in second if c.change != "removed"} == {("regression", probe)}


def test_detail_rows_show_each_changed_line_per_version(root):
    headers, rows = matrix.detail_table(matrix.load_matrix([root]))
    assert headers == ["id", "3.8.0", "3.9.0", "3.10.0"]
    by_id = {row[0]: row[1:] for row in rows}
    assert set(by_id) == {BROKEN, DRIFTING}
    assert by_id[BROKEN][1] == "▼ error" and by_id[BROKEN][2].startswith("▲ pass")
    assert by_id[DRIFTING][2] == "≈ pass 1.9"


def test_group_table_counts_and_marks(root):
    headers, rows = matrix.group_table(matrix.load_matrix([root]))
    groups = {row[0]: row[1:] for row in rows}
    broken_group = matrix.group_of(next(line for line in CASES if line["case"] == BROKEN))
    assert re.fullmatch(r"▼1: \d+ pass, 1 error · [\d.]+", groups[broken_group][1])
    assert groups["probe"] == ["-", "1 pass, 1 fail", "-"]  # only 3.9.0 ran probes and compile checks
    assert groups["compile cuda:sm_90"] == ["-", "1 pass", "-"]


def test_reasons_per_version(root):
    headers, rows = matrix.reason_table(matrix.load_matrix([root]))
    assert headers == ["verdict", "reason", "3.8.0", "3.9.0", "3.10.0"]
    assert ["error", "CompilationError: Block pointers have been removed", "-", 1, "-"] in rows


@pytest.mark.parametrize("fmt, start", [("terminal", "Triton version matrix"), ("markdown", "# Triton version matrix"),
                                         ("html", "<!DOCTYPE html>")])
def test_matrix_command_formats(root, capsys, fmt, start):
    assert main(["matrix", str(root), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert out.startswith(start) and BROKEN in out
    if fmt == "html":
        assert not re.search(r"https?:", out) and 'class="m-regression v-error"' in out


def test_matrix_of_named_run_folders_and_missing_ones(root, tmp_path, capsys):
    assert main(["matrix", str(root / "triton-3.8.0" / "run"), str(root / "triton-3.9.0" / "run")]) == 0
    assert "3.8.0 → 3.9.0" in capsys.readouterr().out
    assert main(["matrix", str(tmp_path / "nothing")]) == 2


# --- the sessions that produce a matrix ----------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def noxfile_constant(name: str):
    """A literal assigned at the top level of noxfile.py (read, not imported: it imports nox)."""
    import ast

    tree = ast.parse((REPO / "noxfile.py").read_text())
    node = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name)
    return ast.literal_eval(node)


def tox_factor_lines(section: str) -> dict[str, str]:
    """tox.ini `factor: value` lines of a [testenv] setting, braces expanded."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    found = {}
    for line in parser["testenv"][section].splitlines():
        factors, colon, value = line.partition(":")
        match = re.fullmatch(r"triton\{([\d,]+)\}|triton(\d+)", factors.strip())
        if colon and match:
            for digits in (match[1] or match[2]).split(","):
                found[f"triton{digits}"] = value.strip()
    return found


def test_tox_factors_match_the_nox_matrix():
    versions = noxfile_constant("MATRIX_TRITON")
    assert versions[0] == "3.2.0" and versions[-1] == "3.9.0" and list(versions) == sorted(versions)
    setenv = tox_factor_lines("setenv")
    assert {env: value.split("=")[1].strip() for env, value in setenv.items()} == {
        "triton" + v.replace(".", ""): v for v in versions}
    pinned = {env for env, value in tox_factor_lines("deps").items() if value == "numpy<2.4"}
    assert pinned == {"triton" + v.replace(".", "") for v in versions if Version(v) < Version("3.7")}


def test_matrix_job_parts_per_machine():
    from types import SimpleNamespace

    from conformance.robustness import matrix_job

    cpu = SimpleNamespace(interpreted=True, key="interpreter:cpu")
    gpu = SimpleNamespace(interpreted=False, key="cuda:sm_90")
    assert matrix_job.parts(gpu, None) == {"run": ["run", "--tier", "auto"]}
    assert matrix_job._label(gpu) == "cuda-sm_90" and matrix_job._label(cpu) == "cpu"
    on_cpu = matrix_job.parts(cpu, 2)
    assert on_cpu["run"] == ["run", "--tier", "auto", "-n", "2"]
    assert on_cpu["compile"] == ["compile", "--scope", "quick"]  # every target family; unsupported ones say so
    assert on_cpu["sweep"] == ["run", "--tier", "sweep-quick", "-n", "2"]


def test_detail_cells_show_each_kind_of_measure():
    lines = {line["case"]: line for line in read_results(DATA / "report_run")}
    compile_fail = lines["compile.bwd_dkdv[cuda:sm_90,fp16,d128]"]
    assert matrix._detail_cell(compile_fail, "regression") == "▼ fail r255 s256K sp1024"
    assert matrix._detail_cell(lines["probe.dot[bf16]"], None) == "fail 1.2e+10"
    assert matrix._detail_cell(CASES[0], "drift") == f"≈ pass {CASES[0]['worst_ratio']:.3g}"
    assert matrix._detail_cell(None, None) == "-"
