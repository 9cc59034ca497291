"""Kernels judged against what they declare they compute (conformance.judging.conventions):
the lse of rows that see no key, a top-left causal mask, fp32 products at TF32. Each
double passes under its declaration and fails without it, on exactly the tensor the
convention concerns."""

import json

import pytest
import torch

from conformance.bundled.reference import MATCHED, MATCHED_TF32, REFERENCE, attention_forward
from conformance.bundled.reference.tf32 import round_to_tf32
from conformance.cases.catalog import Case
from conformance.cli import main
from conformance.judging.conventions import Conventions
from conformance.running.capabilities import from_mapping
from conformance.running.results import read_results

EMPTY_ROWS_LSE = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq20,Sk11,lse,seed0]"  # rows 0-8 see no key
TOP_LEFT_FWD = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"
TOP_LEFT_BWD = "flash_attention.bwd[fp16,d16,causal,B2,H2,Hkv1,Sq13,Sk21,seed0]"
FP32_FWD = "flash_attention.fwd[fp32,d64,noncausal,B1,H2,Hkv2,Sq64,Sk64,seed0]"


def run(tmp_path, double: str, *case_ids: str) -> tuple[int, dict, str]:
    """(exit code, case id -> results line, summary.md) of one run of a double."""
    out = tmp_path / double
    argv = ["run", "--out", str(out), "--kernel", f"flash_attention=tests.convention_doubles:{double}"]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    lines = {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}
    return code, lines, (out / "summary.md").read_text()


def by_tensor(line: dict) -> dict:
    return {tensor["name"]: tensor for tensor in line["tensors"]}


def test_plus_inf_lse_passes_as_declared_and_fails_undeclared_on_the_lse_alone(tmp_path):
    code, lines, summary = run(tmp_path, "lse_plus_inf", EMPTY_ROWS_LSE)
    line = lines[EMPTY_ROWS_LSE]
    assert code == 0 and line["verdict"] == "pass" and line["conventions"] == {"lse_empty_rows": "+inf"}
    assert "Judged as declared: lse of rows that see no key judged as +inf (declared): 1 case." in summary
    code, lines, _ = run(tmp_path, "lse_plus_inf_undeclared", EMPTY_ROWS_LSE)
    tensors = by_tensor(lines[EMPTY_ROWS_LSE])
    assert code == 1 and lines[EMPTY_ROWS_LSE]["verdict"] == "fail"
    assert tensors["out"]["passed"] and not tensors["lse"]["passed"] and tensors["lse"]["kernel_err"] == float("inf")


def test_a_finite_lse_on_empty_rows_is_never_a_convention(tmp_path):
    code, lines, _ = run(tmp_path, "lse_zero", EMPTY_ROWS_LSE)
    assert code == 1 and not by_tensor(lines[EMPTY_ROWS_LSE])["lse"]["passed"]


def test_a_top_left_kernel_is_judged_top_left_when_it_says_so(tmp_path):
    code, lines, summary = run(tmp_path, "top_left", TOP_LEFT_FWD, TOP_LEFT_BWD)
    assert code == 0 and {line["verdict"] for line in lines.values()} == {"pass"}
    assert all(line["conventions"] == {"causal_alignment": "top_left"} for line in lines.values())
    assert "causal mask judged top-left (declared" in summary
    main(["run", "--out", str(tmp_path / "undeclared"), "--case", TOP_LEFT_FWD, "--case", TOP_LEFT_BWD,
          "--kernel", "flash_attention=tests.fake_kernels:causal_top_left"])
    undeclared = [line for line in read_results(tmp_path / "undeclared") if line.get("kind", "case") == "case"]
    assert {line["verdict"] for line in undeclared} == {"fail"}


def test_tf32_products_pass_as_declared_and_fail_undeclared(tmp_path):
    code, lines, summary = run(tmp_path, "tf32", FP32_FWD)
    assert code == 0 and lines[FP32_FWD]["verdict"] == "pass"
    assert lines[FP32_FWD]["conventions"] == {"fp32_matmul": "tf32"}
    assert "fp32 judged as TF32 (declared)" in summary
    code, lines, _ = run(tmp_path, "tf32_undeclared", FP32_FWD)
    assert code == 1 and lines[FP32_FWD]["verdict"] == "fail" and "conventions" not in lines[FP32_FWD]


def test_round_to_tf32_keeps_ten_mantissa_bits_rounding_ties_away_from_zero():
    values = torch.tensor([1.0, 1 + 2**-11, 1 + 2**-10 + 2**-11, -(1 + 2**-11), 1 + 2**-12, float("inf")])
    assert round_to_tf32(values).tolist() == [1.0, 1 + 2**-10, 1 + 2**-9, -(1 + 2**-10), 1.0, float("inf")]
    assert round_to_tf32(torch.tensor([float("nan")])).isnan().all()


def test_the_tf32_torch_path_rounds_only_fp32_operands():
    q, k, v = (torch.randn(1, 2, 16, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    ieee, tf32 = (attention_forward(q, k, v, precision=p)[0] for p in (MATCHED, MATCHED_TF32))
    exact = attention_forward(q, k, v, precision=REFERENCE)[0]
    assert (tf32 - exact).abs().max() > 100 * (ieee - exact).abs().max()  # TF32: ~1e-3 relative, fp32 ~1e-7
    half = [t.half() for t in (q, k, v)]
    assert torch.equal(attention_forward(*half, precision=MATCHED)[0], attention_forward(*half, precision=MATCHED_TF32)[0])


def test_top_left_is_unsupported_only_where_the_operator_cannot_judge_it():
    declared = from_mapping({"causal_alignment": "top_left"}, "test")
    flash = Case.from_id(TOP_LEFT_FWD)
    piecewise = Case.from_id("piecewise_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,dist8,seed0]")
    assert declared.unsupported_reason(flash) is None
    assert "piecewise_attention is judged bottom-right only" in declared.unsupported_reason(piecewise)
    assert declared.conventions() == Conventions(causal_alignment="top_left")


@pytest.mark.parametrize("key, value", [("lse_empty_rows", "0"), ("fp32_matmul", "bf16x3"),
                                        ("causal_alignment", "diagonal")])
def test_an_unknown_convention_names_its_key(key, value):
    with pytest.raises(ValueError, match=f"test: {key}: expected one of"):
        from_mapping({key: value}, "test")


def test_conventions_apply_only_where_they_change_the_judging():
    declared = Conventions(causal_alignment="top_left", lse_empty_rows="+inf", fp32_matmul="tf32")
    assert declared.applied(Case.from_id(FP32_FWD)) == {"fp32_matmul": "tf32"}
    assert declared.applied(Case.from_id(TOP_LEFT_FWD)) == {"causal_alignment": "top_left"}  # no empty rows top-left
    bottom_right = Conventions(lse_empty_rows="+inf")
    assert bottom_right.applied(Case.from_id(EMPTY_ROWS_LSE)) == {"lse_empty_rows": "+inf"}
    assert json.dumps(Conventions().applied(Case.from_id(EMPTY_ROWS_LSE))) == "{}"


def test_the_bundled_kernel_with_plus_inf_lse_fails_undeclared_on_the_empty_rows_alone(tmp_path):
    code, lines, _ = run(tmp_path, "bundled_lse_plus_inf", EMPTY_ROWS_LSE)
    assert code == 0 and lines[EMPTY_ROWS_LSE]["verdict"] == "pass"
    code, lines, _ = run(tmp_path, "bundled_lse_plus_inf_undeclared", EMPTY_ROWS_LSE)
    tensors = by_tensor(lines[EMPTY_ROWS_LSE])
    assert code == 1 and tensors["out"]["passed"] and not tensors["lse"]["passed"]
