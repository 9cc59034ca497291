"""`python -m conformance list | run | report`, end to end, with the fake kernels of
tests/fake_kernels.py at tiny shapes on the CPU (no Triton launches)."""

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cases.tiers import cases
from conformance.cli import main
from conformance.running.results import read_env, read_results

REPO = Path(__file__).resolve().parent.parent
FWD_FP32 = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
FWD_FP16_LSE = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"
BWD_FP16 = "flash_attention.bwd[fp16,d16,causal,B2,H2,Hkv1,Sq13,Sk21,seed0]"




def run_cli(tmp_path, fake, *case_ids, extra=()):
    """Run one `run` in-process; returns (exit code, case results lines, run dir)."""
    out = tmp_path / "run"
    argv = ["run", "--out", str(out), "--kernel", f"flash_attention=tests.fake_kernels:{fake}", *extra]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    return code, [line for line in read_results(out) if line.get("kind") != "probe"], out


def test_list_prints_only_case_ids(capsys):
    assert main(["list", "--tier", "smoke"]) == 0
    assert capsys.readouterr().out.splitlines() == [case.id for case in cases("smoke")]


def test_list_as_a_program():
    completed = subprocess.run([sys.executable, "-m", "conformance", "list", "--tier", "standard"],
                               cwd=REPO, capture_output=True, text=True, check=True)
    assert completed.stdout.splitlines() == [case.id for case in cases("standard")]


@pytest.mark.parametrize("case_id", [FWD_FP32, FWD_FP16_LSE, BWD_FP16])
def test_an_exact_kernel_passes(tmp_path, case_id):
    code, lines, out = run_cli(tmp_path, "exact", case_id)
    assert code == 0
    (line,) = lines
    assert (line["case"], line["verdict"]) == (case_id, "pass")
    expected = {"fwd": ["out", "lse"] if "lse" in case_id else ["out"], "bwd": ["dq", "dk", "dv"]}
    assert [t["name"] for t in line["tensors"]] == expected[line["direction"]]
    assert line["implementation"] == "tests.fake_kernels:exact"
    assert read_env(out)["implementation"] == {"flash_attention": "tests.fake_kernels:exact",
                                               "piecewise_attention": "kernels:piecewise_attention",
                                               "flash_attention_varlen": "kernels:flash_attention_varlen",
                                               "kv_cache_attention": "kernels:kv_cache_attention"}
    assert "tests.fake_kernels:exact" in (out / "summary.md").read_text()


@pytest.mark.parametrize(
    "fake, verdict, reason",
    [
        ("scale_off", "fail", "out ratio"),
        ("raises", "error", "RuntimeError: fake kernel failure"),
        ("nan", "nonfinite", "out: 1 non-finite values"),
    ],
)
def test_a_wrong_kernel_fails_the_run_with_a_reproducer(tmp_path, fake, verdict, reason):
    code, (line,), out = run_cli(tmp_path, fake, FWD_FP32)
    assert code == 1
    assert line["verdict"] == verdict and reason in line["reason"]
    assert line["reproduce"] == (f"python -m conformance run --case '{FWD_FP32}' "
                                 f"--kernel flash_attention=tests.fake_kernels:{fake}")
    assert line["reproduce"] in (out / "summary.md").read_text()


def test_wrong_gradients_fail(tmp_path):
    code, (line,), _ = run_cli(tmp_path, "scale_off", BWD_FP16)
    assert code == 1 and line["verdict"] == "fail"
    assert all(not tensor["passed"] for tensor in line["tensors"])


def test_unsupported_cases_are_skipped_without_launching(tmp_path):
    fp8 = FWD_FP32.replace("fp32", "fp8e4m3")  # the interpreter profile lists no fp8
    code, (line,), _ = run_cli(tmp_path, "raises", fp8, extra=["--backend", "interpreter"])
    assert code == 0
    assert line["verdict"] == "unsupported" and "fp8e4m3 not supported on interpreter" in line["reason"]
    assert "--backend interpreter" in line["reproduce"]


def test_a_crashing_worker_is_recorded_as_error(tmp_path):
    pytest.importorskip("xdist")
    code, (line,), _ = run_cli(tmp_path, "crashes", BWD_FP16, extra=["-n", "1"])
    assert code == 1
    assert (line["case"], line["verdict"]) == (BWD_FP16, "error")
    assert "crashed" in line["reason"] and "--kernel flash_attention=tests.fake_kernels:crashes" in line["reproduce"]


def test_report_rerenders_a_run(tmp_path, capsys):
    run_cli(tmp_path, "exact", FWD_FP32)
    (tmp_path / "run" / "summary.md").unlink()
    capsys.readouterr()
    assert main(["report", str(tmp_path / "run")]) == 0
    assert "1 case: pass 1" in capsys.readouterr().out
    assert (tmp_path / "run" / "summary.md").exists()


@pytest.mark.parametrize(
    "argv, argument",
    [
        (["list", "--tier", "nightly"], "argument --tier"),
        (["run", "--tier", "nightly"], "argument --tier"),
        (["run", "--case", "flash_attention.fwd[fp16]"], "argument --case"),
        (["run", "--kernel", "flash_attention:tests.fake_kernels.exact"], "argument --kernel"),
        (["run", "--kernel", "flash_attention=tests.fake_kernels:missing"], "argument --kernel"),
        (["run", "--backend", "tpu"], "argument --backend"),
        (["run", "-n", "two"], "argument -n"),
        (["report", "/nonexistent/run"], "argument DIR"),
        ([], "command"),
    ],
)
def test_usage_errors_exit_2_with_one_line_naming_the_argument(capsys, argv, argument):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("conformance: error: ") and argument in err
    assert err.count("\n") == 1


def test_usage_error_as_a_program():
    completed = subprocess.run([sys.executable, "-m", "conformance", "run", "--case", "nope"],
                               cwd=REPO, capture_output=True, text=True)
    assert completed.returncode == 2
    assert completed.stdout == "" and "argument --case: malformed case id 'nope'" in completed.stderr
