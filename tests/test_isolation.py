"""Crash and hang isolation, and resuming a run, end to end on the CPU.

The fake kernel `segfaults_if_causal` (tests/fake_kernels.py) computes exactly,
except that causal cases kill their process. The mutants `crash` (an illegal
address when Sk == 1) and `hang` (an endless key loop when Sq == 1) fault inside
the real Triton kernels.
"""

import subprocess
import sys

import pytest

from conformance.cli import main
from conformance.running.results import RESULTS_FILE, ResultsWriter, read_env, read_results
from tests.test_cli import REPO, run_cli

NONCAUSAL_FWD = "flash_attention.fwd[fp32,d16,noncausal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
CAUSAL_FWD = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
NONCAUSAL_BWD = "flash_attention.bwd[fp16,d16,noncausal,B2,H2,Hkv1,Sq13,Sk21,seed0]"
THREE_CASES = (NONCAUSAL_FWD, CAUSAL_FWD, NONCAUSAL_BWD)


def case_lines(out) -> list[dict]:
    return [line for line in read_results(out) if line.get("kind", "case") == "case"]


def verdicts_by_case(lines) -> dict:
    return {line["case"]: line["verdict"] for line in lines}


def test_a_segfaulting_case_is_an_error_and_the_run_goes_on(tmp_path):
    code, _, out = run_cli(tmp_path, "segfaults_if_causal", *THREE_CASES, extra=["--isolate"])
    lines = case_lines(out)
    assert code == 1
    assert verdicts_by_case(lines) == {NONCAUSAL_FWD: "pass", CAUSAL_FWD: "error", NONCAUSAL_BWD: "pass"}
    crashed = next(line for line in lines if line["case"] == CAUSAL_FWD)
    assert crashed["reason"] == "worker crashed (signal SIGSEGV)"
    assert "segfaults_if_causal" in crashed["traceback"]  # faulthandler's stack of the dead worker
    assert "--kernel flash_attention=tests.fake_kernels:segfaults_if_causal" in crashed["reproduce"]


def test_a_crashed_run_resumes_where_it_died(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "conformance", "run", "--out", str(out), "--no-isolate",
               "--kernel", "flash_attention=tests.fake_kernels:segfaults_if_causal"]
    for case_id in THREE_CASES:
        command += ["--case", case_id]
    died = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert died.returncode != 0, died.stdout[-3000:] + died.stderr[-3000:]  # it segfaulted at the second case
    before = (out / RESULTS_FILE).read_text()
    assert verdicts_by_case(case_lines(out)) == {NONCAUSAL_FWD: "pass"}

    assert main(["run", "--resume", str(out), "--isolate"]) == 1
    assert (out / RESULTS_FILE).read_text().startswith(before)  # nothing written is lost
    lines = case_lines(out)
    assert [line["case"] for line in lines] == list(THREE_CASES)  # each case once
    assert verdicts_by_case(lines) == {NONCAUSAL_FWD: "pass", CAUSAL_FWD: "error", NONCAUSAL_BWD: "pass"}
    probe_ids = [line["case"] for line in read_results(out) if line.get("kind") == "probe"]
    assert len(probe_ids) == len(set(probe_ids))  # the probes are not run again
    env = read_env(out)
    assert env["selection"]["kernels"] == ["flash_attention=tests.fake_kernels:segfaults_if_causal"]
    assert len(env["resumed"]) == 1 and env["resumed"][0]["time_utc"] >= env["time_utc"]


def test_resuming_a_finished_run_adds_nothing(tmp_path):
    code, _, out = run_cli(tmp_path, "exact", NONCAUSAL_FWD)
    before = (out / RESULTS_FILE).read_text()
    assert code == 0 and main(["run", "--resume", str(out)]) == 0
    assert (out / RESULTS_FILE).read_text() == before


@pytest.mark.parametrize("extra, message", [
    (["--case", NONCAUSAL_FWD], "argument --resume reuses the run's own selection; drop cases"),
    (["--seeds", "3"], "drop seeds"),
])
def test_resume_takes_the_selection_from_the_run(tmp_path, capsys, extra, message):
    _, _, out = run_cli(tmp_path, "exact", NONCAUSAL_FWD)
    capsys.readouterr()
    assert main(["run", "--resume", str(out), *extra]) == 2
    assert message in capsys.readouterr().err


def test_resume_needs_a_run_folder(tmp_path, capsys):
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "holds no run to resume" in capsys.readouterr().err


def test_appending_cuts_a_line_torn_by_a_crash(tmp_path):
    whole = '{"case": "a", "verdict": "pass"}\n'
    (tmp_path / RESULTS_FILE).write_text(whole + '{"case": "b", "verd')
    writer = ResultsWriter(tmp_path, {}, append=True)
    writer.append({"case": "c", "verdict": "pass"})
    writer.close()
    assert [line["case"] for line in read_results(tmp_path)] == ["a", "c"]


@pytest.mark.parametrize("mutant, case_id, reason", [
    ("crash", "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq50,Sk1,seed0]", "worker crashed (signal SIGSEGV)"),
    ("hang", "flash_attention.fwd[fp16,d64,noncausal,B2,H2,Hkv1,Sq1,Sk100,seed0]", "timeout after 8 s (worker killed)"),
])
def test_the_robustness_mutants_cost_one_case(tmp_path, mutant, case_id, reason):
    """The real Triton kernels, edited to fault: the faulty case errs, with the stack of
    the worker where it died or hung; the next case passes in a fresh worker."""
    neighbour = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed0]"
    out = tmp_path / "run"
    code = main(["run", "--out", str(out), "--isolate", "--case-timeout", "8", "--case", case_id, "--case", neighbour,
                 "--kernel", f"flash_attention=conformance.bundled.mutants.registry:flash_attention_{mutant}"])
    lines = case_lines(out)
    assert code == 1
    assert verdicts_by_case(lines) == {case_id: "error", neighbour: "pass"}
    assert lines[0]["reason"] == reason
    assert f"_fa_mutant_{mutant}" in lines[0]["traceback"] and "in launch" in lines[0]["traceback"]
    if mutant == "hang":
        assert 8 <= lines[0]["duration_s"] < 15


def _runner(backend: str):
    from conformance.cases.catalog import Case
    from conformance.running.isolation import IsolatedRunner

    def error_line(case, reason, traceback=""):
        return {"case": case.id, "verdict": "error", "reason": reason}

    config = {"backend": backend, "kernels": ["flash_attention=tests.fake_kernels:exact"]}
    return IsolatedRunner(config, timeout_s=120, error_line=error_line), Case.from_id(NONCAUSAL_FWD)


def test_a_worker_started_ahead_serves_the_first_case():
    runner, case = _runner("interpreter")
    runner.start()  # what the plugin does once it has collected cases
    try:
        line = runner.run(case)
    finally:
        runner.close()
    assert (line["case"], line["verdict"], runner.restarts) == (NONCAUSAL_FWD, "pass", 0)
    assert line["phases"]["isolation"] >= 0 and "launch" in line["phases"]


def test_a_worker_started_ahead_that_cannot_start_costs_the_first_case_only_its_line():
    runner, case = _runner("no-such-backend")
    runner.start()
    try:
        first, second = runner.run(case), runner.run(case)
    finally:
        runner.close()
    for line in (first, second):  # each case gets a worker of its own, and an error line
        assert line["verdict"] == "error" and line["reason"].startswith("worker failed to start: worker crashed")
