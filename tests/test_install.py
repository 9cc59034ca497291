"""The harness as an installed distribution, used from another repository.

The wheel is built from a copy of the sources (a build writes build/ and *.egg-info
beside them) and installed into a fresh virtualenv that sees this Python's torch and
triton (--system-site-packages, plus a .pth naming this process's own site folders:
under nox they are the session's, not the system's). The virtualenv sits in a
repository of the kind the harness is for (`.venv/`): `kernels/` of its own (the
user's attention kernel lives there), a conftest.py, and, on PYTHONPATH, top-level
`kernels` and `reference` packages that raise when imported. From that repository the
installed `fa-conformance` and the pytest entry point judge a few smoke cases: the
decoys never fire (nor a `conformance` folder of theirs, for the isolated workers the
command starts), the user's `kernels` is only imported when named with --kernel,
`fa-conformance` runs its pytest without the user's conftest.py, and the verdicts and
ratios are those of `python -m conformance run` from this clone. The wheel is built once per
test session (every pytest-xdist worker installs that one); each worker that runs these tests
has its virtualenv and repository of its own (the tests change files there). About 25 s on 2 cores.
"""

from __future__ import annotations

import itertools
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conformance.cases.tiers import cases
from conformance.running.results import read_results
from tests.session_files import made_once_per_session

REPO = Path(__file__).resolve().parent.parent
BUNDLED = ("kernels", "reference", "mutants", "benchmarks")  # installed as conformance.bundled.<name>
CASES = ("flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "flash_attention.bwd[bf16,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "piecewise_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk100,dist24,seed0]",
         "flash_attention.fwd[fp8e4m3,d32,causal,B1,H2,Hkv1,Sq77,Sk100,seed0]")  # unsupported on the CPU
THEIR_CASE = "flash_attention.fwd[fp32,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed0]"
CASE_ARGS = [f"--case={case}" for case in CASES]
DECOY = "raise ImportError('the top-level {name} of the user, not the harness: the harness must not import it')\n"
THEIR_KERNEL = """
    import torch

    def flash_attention(q, k, v, causal=False, sm_scale=None):
        '''The user's own kernel: float64 attention, rounded once (non-causal cases only).'''
        scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
        group = q.shape[1] // k.shape[1]
        k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
        return ((q.double() @ k.transpose(-1, -2) * scale).softmax(-1) @ v).to(q.dtype)
"""


def _run(command: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(word) for word in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _build_wheel(work: Path) -> None:
    """The wheel in work/wheels/, built from a copy of the sources in work/source/."""
    source = work / "source"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    for name in ("conformance", *BUNDLED):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
              "-w", work / "wheels", source], cwd=work))


def _site_folders() -> list[str]:
    """The folders this process imports installed packages from (not this clone)."""
    folders = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [folder for folder in dict.fromkeys(folders) if Path(folder).is_dir()
            and Path(folder).name in ("site-packages", "dist-packages") and Path(folder).resolve() != REPO]


def _virtualenv(project: Path, wheel: Path) -> Path:
    venv = project / ".venv"
    work = project.parent
    _ok(_run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], cwd=work))
    python = venv / "bin" / "python"
    purelib = _ok(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work))
    purelib = Path(purelib.stdout.strip())
    (purelib / "fa_host_site.pth").write_text("".join(f"{folder}\n" for folder in _site_folders()))
    # FA_HIDE_TRITON=1 makes triton missing in this virtualenv (as if it were never installed)
    (purelib / "fa_hide_triton.pth").write_text(
        "import os, sys; os.environ.get('FA_HIDE_TRITON') and sys.modules.__setitem__('triton', None)\n")
    _ok(_run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-warn-script-location", wheel], cwd=work))
    return venv


def _their_repository(work: Path) -> tuple[Path, dict]:
    """(their working directory, the environment their commands run in)."""
    decoys, project = work / "decoys", work / "project"
    for name in ("kernels", "reference"):
        (decoys / name).mkdir(parents=True)
        (decoys / name / "__init__.py").write_text(DECOY.format(name=name))
    (project / "kernels").mkdir(parents=True)
    (project / "kernels" / "__init__.py").write_text(  # records every import of their `kernels`
        "import os\nopen(os.path.join(os.path.dirname(__file__), '..', 'imported.log'), 'a').write('kernels\\n')\n")
    (project / "kernels" / "attention.py").write_text(textwrap.dedent(THEIR_KERNEL))
    (project / "conftest.py").write_text(  # theirs: pytest runs of their repository load it, fa-conformance's not
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'imported.log'), 'a').write('conftest\\n')\n")
    (project / "test_theirs.py").write_text("def test_theirs():\n    assert 1 + 1 == 2\n")
    env = {key: value for key, value in os.environ.items() if key not in ("TRITON_INTERPRET", "PYTHONPATH")}
    return project, {**env, "PYTHONPATH": str(decoys), "PATH": f"{project / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The harness's wheel, built once per test session (read only: installed, never changed)."""
    (built,) = (made_once_per_session(tmp_path_factory, "wheel", _build_wheel) / "wheels").glob("fa_conformance-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    work = tmp_path_factory.mktemp("install")
    project, env = _their_repository(work)
    venv = _virtualenv(project, wheel)
    return {"work": work, "wheel": wheel, "venv": venv, "project": project, "env": env}


def _case_lines(out: Path) -> dict:
    return {line["case"]: (line["verdict"], line["worst_ratio"], line["implementation"])
            for line in read_results(out) if line.get("kind", "case") == "case"}


def _run_in_this_clone(folder: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}  # detected, as theirs
    done = _run([sys.executable, "-m", "conformance", "run", "--no-isolate", "--out", folder / "run", *CASE_ARGS],
                REPO, env)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def clone_verdicts(tmp_path_factory):
    """The verdicts, ratios and implementations of CASES run from this clone (once per test session)."""
    return _case_lines(made_once_per_session(tmp_path_factory, "clone-run", _run_in_this_clone) / "run")


def test_the_wheel_installs_one_package_holding_every_file_of_the_harness(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    top_level = {name.split("/")[0] for name in names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"conformance"}  # shadows nothing
    expected = {f"conformance/bundled/{path.relative_to(REPO)}" if path.relative_to(REPO).parts[0] in BUNDLED
                else str(path.relative_to(REPO))
                for package in ("conformance", *BUNDLED) for path in (REPO / package).rglob("*")
                if path.is_file() and "__pycache__" not in path.parts}
    assert sorted(expected - names) == []  # a subpackage or data file missing from pyproject.toml
    entry_points = zipfile.ZipFile(wheel).read(
        next(name for name in names if name.endswith("entry_points.txt"))).decode()
    assert "fa-conformance = conformance.__main__:main" in entry_points
    assert "conformance.pytest_plugin = conformance.pytest_plugin" in entry_points


def test_the_command_judges_the_bundled_kernels_from_another_repository(installed, clone_verdicts):
    project, env, out = installed["project"], installed["env"], installed["work"] / "cli-run"
    (project / "imported.log").unlink(missing_ok=True)
    where = _ok(_run(["python", "-c", "import conformance; print(conformance.__file__)"], project, env))
    assert Path(where.stdout.strip()).is_relative_to(installed["venv"])  # the installed copy, not this clone
    # a `conformance` of their own too: the isolated workers must still start this harness
    (project / "conformance").mkdir()
    (project / "conformance" / "__init__.py").write_text(DECOY.format(name="conformance"))
    try:
        done = _run(["fa-conformance", "run", "--tier", "smoke", "--isolate", "--out", out, *CASE_ARGS],
                    project, env)
    finally:
        shutil.rmtree(project / "conformance")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _case_lines(out) == clone_verdicts  # same verdicts, same ratios: the same kernels judged
    assert {verdict for verdict, _, _ in clone_verdicts.values()} <= {"pass", "unsupported", "xfail"}
    assert not (project / "imported.log").exists()  # neither their kernels/ nor their conftest.py


def _traits(case) -> dict:
    """What a case exercises (the mutant hunts' pairwise traits, conformance.bundled.mutants.ordering),
    and its own input values (`negative:1000`)."""
    from conformance.bundled.mutants.ordering import traits

    return {**traits(case), "values": case.values}


def every_kind_of_case(tier: str) -> list[str]:
    """Ids of cases of `tier` that, together, hold every pair of trait values any two of its cases
    hold (op x direction, dropout x backward, GQA x layout, NaN x piecewise, fp8, ...): greedily
    the case adding the most new pairs per unit of cost, until none adds one (in tier order)."""
    from conformance.bundled.mutants.ordering import case_cost

    tier_cases = cases(tier)
    pairs = {case.id: set(itertools.combinations(sorted(_traits(case).items()), 2)) for case in tier_cases}
    covered, chosen = set(), set()
    while True:
        best = max(tier_cases, key=lambda case: (len(pairs[case.id] - covered) / case_cost(case), case.id))
        if not pairs[best.id] - covered:
            return [case.id for case in tier_cases if case.id in chosen]
        covered |= pairs[best.id]
        chosen.add(best.id)


def test_every_kind_of_smoke_case_runs_from_another_repository(installed):
    """The smoke tier's cases of every kind (every pair of trait values its cases hold: about
    half of its cases, a third of its time), by the installed command from their repository
    (its kernels/, decoys on PYTHONPATH): each case passes or is unsupported, all of them judged
    on the bundled kernels. (The cases above compare verdicts and ratios with this clone's.)"""
    project, env, out = installed["project"], installed["env"], installed["work"] / "smoke-tier"
    selected = every_kind_of_case("smoke")
    (project / "imported.log").unlink(missing_ok=True)
    done = _run(["fa-conformance", "run", "--out", out, *(f"--case={case}" for case in selected)], project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in read_results(out) if line.get("kind", "case") == "case"]
    assert sorted(line["case"] for line in lines) == sorted(selected)
    assert {line["verdict"] for line in lines} <= {"pass", "unsupported"}
    assert {line["implementation"] for line in lines} == \
        {"kernels:flash_attention", "kernels:flash_attention_varlen", "kernels:piecewise_attention",
         "kernels:kv_cache_attention"}
    assert not (project / "imported.log").exists()


def test_the_smoke_cases_run_above_hold_every_kind_the_tier_holds():
    """What the run above stands for: every trait value, and every pair of them, of any smoke
    case is held by a case it runs."""
    smoke = cases("smoke")
    chosen = set(every_kind_of_case("smoke"))
    assert len(chosen) < len(smoke)

    def pairs(selection):
        return {pair for case in selection for pair in itertools.combinations(sorted(_traits(case).items()), 2)}

    assert pairs(case for case in smoke if case.id in chosen) == pairs(smoke)


def test_the_pytest_entry_point_judges_them_too(installed, clone_verdicts):
    project, out = installed["project"], installed["work"] / "pytest-run"
    (project / "imported.log").unlink(missing_ok=True)
    env = {**installed["env"], "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # so `-p` alone must find it
    done = _run(["python", "-m", "pytest", "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider", "-v",
                 "--conformance-tier", "smoke", "--conformance-out", out,
                 *(f"--conformance-case={case}" for case in CASES)], project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_theirs.py::test_theirs PASSED" in done.stdout  # their tests run beside the catalog
    assert _case_lines(out) == clone_verdicts
    assert (project / "imported.log").read_text().split() == ["conftest"]  # their session: not their kernels


def test_their_own_kernels_package_is_what_kernel_judges(installed):
    project, env, out = installed["project"], installed["env"], installed["work"] / "their-run"
    (project / "imported.log").unlink(missing_ok=True)
    done = _run(["fa-conformance", "run", "--out", out, "--case", THEIR_CASE,
                 "--kernel", "flash_attention=kernels.attention:flash_attention"], project, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _case_lines(out)[THEIR_CASE][::2] == ("pass", "kernels.attention:flash_attention")
    assert "kernels" in (project / "imported.log").read_text().split()  # theirs, not the decoy on PYTHONPATH


def test_an_installation_without_triton_says_so_in_one_line(installed):
    env = {**installed["env"], "FA_HIDE_TRITON": "1"}
    done = _run(["fa-conformance", "run", "--tier", "smoke"], installed["project"], env)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("conformance: error: triton is not installed in this Python")
    assert "pip install triton" in line
