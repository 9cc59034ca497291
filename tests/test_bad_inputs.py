"""NaN and Inf inputs: they propagate as through torch, the rest is judged by the rule,
and nothing crashes (issue 3, "Bad input").

A case with `bad_input` plants one NaN or +Inf in the first query tensor; the float64
reference, run with finite stand-ins for it, says where it must show up
(conformance.judging.bad_inputs). The rule skips those positions when measuring errors and
requires the implementation to be non-finite there instead."""

import math

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # before the kernels are imported (interpreter on CPU)

from conformance.judging import bad_inputs  # noqa: E402
from conformance.cases.catalog import Case  # noqa: E402
from conformance.cases.inputs import bad_input_position, make_inputs  # noqa: E402
from conformance.judging.rule import BadInputRegion, compare_tensor, max_abs_error  # noqa: E402
from conformance.running.implementations import Implementations  # noqa: E402
from conformance.running.runner import run_case  # noqa: E402
from conformance.bundled.reference import REFERENCE, attention_forward  # noqa: E402

NAN, INF = math.nan, math.inf


def region(reached, own_slice):
    return BadInputRegion(torch.tensor(reached), torch.tensor(own_slice))


def test_where_the_bad_value_must_show_a_finite_kernel_value_is_unpropagated():
    ref = torch.tensor([1.0, 2.0, 3.0])
    kernel = torch.tensor([1.0, 7.0, NAN])
    record = compare_tensor("out", kernel, ref, ref, "fp32",
                            bad_input=region([False, True, True], [True, True, True]))
    assert record["unpropagated"] == 1 and record["kernel_err"] == 0 and record["nonfinite"] == 0


def test_extra_nonfinite_values_are_tolerated_only_in_the_bad_slice():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    kernel = torch.tensor([NAN, 2.0, INF, 4.0])
    record = compare_tensor("out", kernel, ref, ref, "fp32",
                            bad_input=region([True, False, False, False], [True, True, True, False]))
    assert record["spilled"] == 1 and record["nonfinite"] == 0 and record["passed"]
    outside = compare_tensor("out", torch.tensor([NAN, 2.0, 3.0, INF]), ref, ref, "fp32",
                             bad_input=region([True, False, False, False], [True, True, False, False]))
    assert outside["nonfinite"] == 1 and not outside["passed"]


def test_minus_inf_stays_an_exact_contract():
    """-inf is the log-normalizer of a row that sees no key: NaN there is an error."""
    ref = torch.tensor([0.0, -INF])
    assert max_abs_error(torch.tensor([0.0, NAN]), ref) == INF
    assert max_abs_error(torch.tensor([0.0, -INF]), ref) == 0


def test_dependence_is_measured_with_finite_stand_ins():
    """The reached region is exactly what changes with the planted value: the bad row of
    out and lse, and the keys that row sees in total attention -- no 0 x NaN spread."""
    case = Case("flash_attention", "fwd", "fp32", 16, True, 1, 2, 1, 8, 8, bad_input="nan")
    inputs = make_inputs(case, "cpu")
    results = [dict(zip(("out", "lse", "total"), attention_forward(
        *bad_inputs.replaced(case, inputs.tensors, value).values(), causal=True, precision=REFERENCE,
        return_total=True))) for value in (bad_inputs.CLEAN_VALUE, bad_inputs.PROBE_VALUE)]
    regions = bad_inputs.regions(case, *results)
    row = bad_input_position(case)[2]
    assert regions["out"].reached[0, 0].any(dim=-1).tolist() == [i == row for i in range(8)]
    assert not regions["out"].reached[0, 1].any(), "the other head never sees the bad value"
    assert regions["lse"].reached[0, 0].tolist() == [i == row for i in range(8)]
    assert regions["total"].reached[0, 0].tolist() == [j <= row for j in range(8)]
    assert regions["total"].own_slice[0, 0].all() and not regions["total"].own_slice[0, 1].any()


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_one_query_element_is_planted(bad):
    case = Case("flash_attention", "fwd", "fp16", 16, True, 2, 2, 1, 9, 12, bad_input=bad)
    q = make_inputs(case, "cpu").q
    bad_mask = ~torch.isfinite(q)
    assert int(bad_mask.sum()) == 1 and bool(bad_mask[bad_input_position(case)])
    assert torch.isnan(q).any() == (bad == "nan")


@pytest.mark.parametrize("case_id", [
    "flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq64,Sk96,lse,total,nan,seed0]",
    "flash_attention.fwd[fp16,d32,noncausal,B1,H2,Hkv1,Sq64,Sk96,lse,inf,seed0]",
    "flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv1,Sq64,Sk96,nan,seed0]",
    "flash_attention.bwd[fp16,d32,causal,B1,H8,Hkv2,Sq109,Sk224,inf,seed0]",
    "piecewise_attention.bwd[bf16,d32,causal,B1,H8,Hkv2,Sq109,Sk224,dist16,nan,seed0]",
])
def test_bundled_kernel_propagates_bad_inputs(case_id):
    line = run_case(Case.from_id(case_id), PROFILE, Implementations.from_specs([]))
    assert line["verdict"] == "pass", line["reason"]
    assert all(t["unpropagated"] == 0 for t in line["tensors"])


def test_an_implementation_that_swallows_nan_fails():
    case = Case.from_id("flash_attention.fwd[fp16,d16,noncausal,B1,H1,Hkv1,Sq8,Sk8,nan,seed0]")
    implementations = Implementations.from_specs(["flash_attention=tests.fake_kernels:nan_to_zero"])
    line = run_case(case, PROFILE, implementations)
    assert line["verdict"] == "fail"
    assert "not propagated" in line["reason"]
