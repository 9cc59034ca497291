"""Bitwise determinism of forwards: two launches, same bits, or the case fails."""

import json
import math

import pytest
import torch

from conformance.judging import verdicts
from conformance.judging.determinism import bitwise_equal, differing_tensors, verdict_after_check
from tests.test_cli import run_cli

FWD = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
FWD_LSE = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"
BWD = "flash_attention.bwd[fp16,d16,causal,B2,H2,Hkv1,Sq13,Sk21,seed0]"


def test_bits_not_values_are_compared():
    a = torch.tensor([1.0, math.nan, 0.0])
    assert bitwise_equal(a, a.clone())  # NaN == NaN when the bits are the same
    assert not bitwise_equal(a, torch.tensor([1.0, math.nan, -0.0]))  # -0.0 == 0.0 in value, not in bits
    assert not bitwise_equal(a, a.to(torch.float64))
    assert bitwise_equal(torch.ones(4, 4).t(), torch.ones(4, 4))  # layout does not matter
    half = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert not bitwise_equal(half, torch.tensor([1.0, 2.015625], dtype=torch.bfloat16))


def test_differing_tensors_by_name():
    first = {"out": torch.zeros(3), "lse": torch.ones(3)}
    assert differing_tensors(first, {"out": torch.zeros(3), "lse": torch.ones(3)}) == []
    assert differing_tensors(first, {"out": torch.zeros(3), "lse": torch.full((3,), 2.0)}) == ["lse"]
    assert differing_tensors(first, {"out": torch.zeros(3)}) == ["lse"]


@pytest.mark.parametrize("verdict, reason, differing, expected", [
    (verdicts.PASS, "", [], (verdicts.PASS, "")),
    (verdicts.PASS, "", ["out"], (verdicts.FAIL, "forward not bitwise deterministic: out differ between two launches")),
    (verdicts.NONFINITE, "out: 1 non-finite", ["out"],
     (verdicts.NONFINITE, "out: 1 non-finite; forward not bitwise deterministic: out differ between two launches")),
])
def test_a_differing_forward_fails_only_if_it_passed(verdict, reason, differing, expected):
    assert verdict_after_check(verdict, reason, differing) == expected


def test_a_nondeterministic_forward_fails_with_the_finding(tmp_path):
    code, lines, out = run_cli(tmp_path, "nondeterministic", FWD, extra=["--check-determinism"])
    (line,) = [line for line in lines if line.get("kind", "case") == "case"]
    assert code == 1
    assert line["verdict"] == "fail" and line["deterministic"] is False
    assert line["reason"] == "forward not bitwise deterministic: out differ between two launches"
    assert all(tensor["passed"] for tensor in line["tensors"])  # one bit: within the bound
    assert "Determinism: 1 forwards launched twice, 1 differed bitwise" in (out / "summary.md").read_text()


def test_deterministic_forwards_pass_and_backwards_are_not_checked(tmp_path):
    code, lines, _ = run_cli(tmp_path, "exact", FWD_LSE, BWD, extra=["--check-determinism"])
    by_case = {line["case"]: line for line in lines}
    assert code == 0
    assert by_case[FWD_LSE]["deterministic"] is True
    assert "deterministic" not in by_case[BWD]


def test_the_check_is_off_on_the_cpu_by_default(tmp_path):
    _, lines, _ = run_cli(tmp_path, "nondeterministic", FWD)
    assert all("deterministic" not in line for line in lines)


def test_the_report_says_whether_forwards_were_checked(tmp_path):
    """A GPU run checks every forward by default (tests/test_devices.py: the GPU defaults), so a
    GPU session's report says how many it launched twice; a CPU run's says it did not check."""
    code, _, out = run_cli(tmp_path, "exact", FWD_LSE, extra=["--check-determinism"])
    assert code == 0 and json.loads((out / "env.json").read_text())["checks"] == {"determinism": True}
    for report in ("summary.md", "report.html"):
        assert "Determinism: 1 forwards launched twice, 0 differed bitwise" in (out / report).read_text()
    code, _, out = run_cli(tmp_path / "cpu", "exact", FWD_LSE)
    assert code == 0 and json.loads((out / "env.json").read_text())["checks"] == {"determinism": False}
    assert "Determinism: not checked" in (out / "summary.md").read_text()
