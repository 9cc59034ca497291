"""The ways in: `python -m conformance` / `fa-conformance` refuse a Python without the
harness's dependencies in one line, and the pytest entry point (conformance.pytest_plugin,
loaded into every pytest run where the harness is installed) stays out of the way of
test suites that do not ask for the catalog.

The pytest runs here start in an empty folder with this clone on PYTHONPATH and
`-p conformance.pytest_plugin`, which is what an installed entry point does
(tests/test_install.py runs the same from a real installation)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance import __main__ as entry
from conformance import dependencies
from conformance.running.results import read_results

REPO = Path(__file__).resolve().parent.parent
CASE = "flash_attention.fwd[fp16,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed0]"
NAN_CASE = "flash_attention.fwd[fp16,d32,noncausal,B1,H2,Hkv1,Sq64,Sk96,nan,seed0]"
# a GPU key that names no device of this machine, whatever it has
ABSENT_BACKEND = "cuda:sm_90" if torch.version.hip else "hip:gfx942"


def _hide(monkeypatch, *names):
    real = dependencies.importlib.util.find_spec
    monkeypatch.setattr(dependencies.importlib.util, "find_spec", lambda name: None if name in names else real(name))


@pytest.mark.parametrize("argv, named", [(["run", "--tier", "smoke"], "triton is"), (["probes"], "triton is"),
                                         (["list"], "triton is")])
def test_a_missing_dependency_is_one_line_and_exit_2(monkeypatch, capsys, argv, named):
    _hide(monkeypatch, "triton")
    assert entry.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"conformance: error: {named} not installed in this Python ({sys.executable})")
    assert f"{sys.executable} -m pip install triton" in err and err.count("\n") == 1


def test_every_missing_dependency_is_named_and_reading_a_run_needs_no_triton(monkeypatch, capsys):
    _hide(monkeypatch, "triton", "pytest")
    assert entry.main(["run"]) == 2
    assert "triton and pytest are not installed" in capsys.readouterr().err
    assert dependencies.missing("report") == [] and dependencies.missing("diff") == []


def _pytest(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # A fresh session, as a user's: not one of this run's xdist workers (plugins such as
    # pytest-benchmark read PYTEST_XDIST_WORKER and warn, an error under `filterwarnings = error`).
    inherited = {key: value for key, value in os.environ.items()
                 if not key.startswith("PYTEST_XDIST_") and key not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS")}
    env = {**inherited, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _unrelated_project(tmp_path: Path) -> Path:
    """A project with a test that fails if the harness touched its process."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_theirs.py").write_text(
        "import os, sys\n\n"
        "def test_untouched():\n"
        "    assert 'TRITON_INTERPRET' not in os.environ\n"
        "    assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy')]\n"
        "    assert sorted(m for m in sys.modules if m.split('.')[0] == 'conformance') == "
        "['conformance', 'conformance.dependencies', 'conformance.pytest_plugin']\n")
    return project


def test_the_entry_point_leaves_other_test_suites_alone(tmp_path):
    """Alone (no other plugin autoloaded, any of which may import numpy), so that what the
    project's test finds in sys.modules is what this plugin imported."""
    project = _unrelated_project(tmp_path)
    done = _pytest(project, "-q", env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout and "conformance" not in done.stdout
    assert not (project / "reports").exists()  # no run folder either


def test_the_catalog_runs_next_to_a_projects_tests_when_asked(tmp_path):
    """Under the project's own configuration, whose warning filters do not reach the cases
    (the interpreter warns about the NaN case's NaNs: with `error`, it would be an error)."""
    project = _unrelated_project(tmp_path)
    (project / "test_theirs.py").write_text("def test_theirs():\n    pass\n")
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    out = tmp_path / "run"
    done = _pytest(project, "-v", "--conformance-case", CASE, "--conformance-case", NAN_CASE,
                   "--conformance-out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_theirs.py::test_theirs PASSED" in done.stdout
    assert f"conformance/suite.py::{CASE} pass" in done.stdout
    lines = [line for line in read_results(out) if line.get("kind") != "probe"]
    assert [(line["case"], line["verdict"], line["implementation"]) for line in lines] == [
        (CASE, "pass", "kernels:flash_attention"), (NAN_CASE, "pass", "kernels:flash_attention")]


def test_the_catalog_alone_by_its_module_name(tmp_path):
    out = tmp_path / "run"
    done = _pytest(_unrelated_project(tmp_path), "-v", "--pyargs", "conformance.suite", "--conformance-case", CASE,
                   "--conformance-out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_theirs" not in done.stdout and "1 passed" in done.stdout
    assert [line["case"] for line in read_results(out) if line.get("kind") != "probe"] == [CASE]


def test_the_plugin_refuses_an_absent_backend_in_one_line(tmp_path):
    done = _pytest(_unrelated_project(tmp_path), "--conformance-backend", ABSENT_BACKEND)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"ERROR: conformance: --conformance-backend: {ABSENT_BACKEND} ")
    assert "not this machine's GPU" in line or "torch sees none" in line
