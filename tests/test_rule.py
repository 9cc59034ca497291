"""The comparison rule and its helpers: errors, the floor, the judgement, term sizes (the
known-issue registry that converts verdicts: test_known_issues.py)."""

import math

import pytest
import torch

from conformance.cases.catalog import Case
from conformance.cases.inputs import make_inputs
from conformance.judging.operators import OPERATORS, score_size
from conformance.judging.rule import BOUND, compare_tensor, floor, judge, max_abs_error, nonfinite_mismatch

INF = math.inf


# --- max_abs_error / nonfinite_mismatch -------------------------------------------

def test_max_abs_error_is_computed_in_float64():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    actual = torch.tensor([1.0 + 2**-10, 2.0], dtype=torch.float16)
    assert max_abs_error(actual, ref) == 2**-10  # exactly, not rounded to fp16 or fp32


def test_equal_infinities_count_zero():
    ref = torch.tensor([-INF, 0.5, INF], dtype=torch.float64)
    assert max_abs_error(torch.tensor([-INF, 0.25, INF]), ref) == 0.25


@pytest.mark.parametrize("bad", [INF, -INF, math.nan])
def test_nonfinite_where_reference_differs_is_an_infinite_error(bad):
    ref = torch.tensor([-INF, 1.0], dtype=torch.float64)
    assert max_abs_error(torch.tensor([-INF, bad]), ref) == INF


def test_finite_value_where_reference_is_infinite_is_an_infinite_error():
    ref = torch.tensor([-INF], dtype=torch.float64)
    assert max_abs_error(torch.tensor([-1e30]), ref) == INF


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        max_abs_error(torch.zeros(3), torch.zeros(4, dtype=torch.float64))


def test_nonfinite_mismatch_counts_only_where_reference_is_finite():
    ref = torch.tensor([-INF, 1.0, 2.0, 3.0], dtype=torch.float64)
    actual = torch.tensor([-INF, math.nan, INF, 3.0])
    assert nonfinite_mismatch(actual, ref) == 2
    assert nonfinite_mismatch(ref, ref) == 0


# --- floor ----------------------------------------------------------------------------

# The floors below, by hand: unit roundoff u = 2^-(mantissa bits + 1): fp16 2^-11, bf16 2^-8,
# fp32 2^-24; M = the largest finite |ref| (at least 0.3); floor = u_out * (M + delta_noise)
# + u_fp32 * (max(M, term_size) + accumulator_noise).

@pytest.mark.parametrize("dtype_name, roundoff", [("fp16", 2**-11), ("bf16", 2**-8), ("fp32", 2**-24)])
def test_floor_is_the_final_rounding_plus_one_fp32_rounding_at_the_largest_finite_magnitude(dtype_name, roundoff):
    ref = torch.tensor([-INF, 0.5, -4.0, 3.0], dtype=torch.float64)
    assert floor(dtype_name, ref) == roundoff * 4.0 + 2**-24 * 4.0  # M = |-4|: -inf is not finite


def test_floor_counts_the_fp32_rounding_at_the_declared_term_size_when_larger():
    ref = torch.tensor([1.0, -4.0], dtype=torch.float64)  # M = 4
    assert floor("fp32", ref, term_size=10.0) == 2**-24 * (4.0 + 10.0)
    assert floor("fp32", ref, term_size=2.0) == 2**-24 * (4.0 + 4.0)  # a term size below M: M counts
    assert floor("fp32", ref) == 2**-24 * (4.0 + 4.0)
    assert floor("fp16", ref, term_size=10.0) == 2**-11 * 4.0 + 2**-24 * 10.0


def test_floor_of_an_infinite_reference_is_zero_and_of_a_zero_one_cancellation_noise():
    assert floor("fp16", torch.full((3,), -INF, dtype=torch.float64)) == 0.0
    assert floor("fp16", torch.zeros(3, dtype=torch.float64)) == (2**-11 + 2**-24) * 0.3  # cancellation noise


def test_floor_admits_one_rounding_of_the_output_but_not_more():
    """An exact result rounded to fp16 passes even where torch is exact; 1 % off does not."""
    ref = torch.linspace(-3, 3, 1001, dtype=torch.float64)
    rounded = ref.to(torch.float16)
    ratio, passed = judge(max_abs_error(rounded, ref), 0.0, floor("fp16", ref))
    assert passed and ratio <= 1.0
    ratio, passed = judge(max_abs_error((ref * 1.01).to(torch.float16), ref), 0.0, floor("fp16", ref))
    assert not passed and ratio > 10


def test_an_fp32_result_within_two_roundings_passes_and_an_fp16_sized_slip_does_not():
    """The fp32 floor (final rounding + one accumulator rounding) admits the few roundings a
    correct fp32 computation carries, even against an exact torch path; an error of 2^-10
    relative -- an fp16-sized slip, e.g. an fp16 accumulator -- is far outside it."""
    ref = torch.linspace(-3, 3, 1001, dtype=torch.float64)
    twice_rounded = ref.to(torch.float32) * (1 + 2**-23)
    assert judge(max_abs_error(twice_rounded, ref), 0.0, floor("fp32", ref)).passed
    slipped = (ref * (1 + 2**-10)).to(torch.float32)
    assert judge(max_abs_error(slipped, ref), 0.0, floor("fp32", ref)).ratio > 100


# --- judge --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "kernel_err, torch_err, floor_value, expected_ratio, expected_pass",
    [
        (0.0, 0.0, 0.0, 0.0, True),       # 0/0: an exact kernel passes
        (0.0, 1e-3, 1e-4, 0.0, True),
        (2e-3, 1e-3, 1e-4, 2.0, True),    # exactly at the bound
        (3e-3, 1e-3, 1e-4, 3.0, False),
        (1e-6, 0.0, 1e-6, 1.0, True),     # torch exact: the floor is the allowance
        (3e-6, 0.0, 1e-6, 3.0, False),
        (1e-6, 0.0, 0.0, INF, False),     # nothing allowed, something wrong
        (INF, 1e-3, 1e-4, INF, False),
        (math.nan, 1e-3, 1e-4, INF, False),
    ],
)
def test_judge(kernel_err, torch_err, floor_value, expected_ratio, expected_pass):
    ratio, passed = judge(kernel_err, torch_err, floor_value)
    assert ratio == expected_ratio
    assert passed is expected_pass


def test_judge_fails_when_the_torch_path_itself_is_broken():
    ratio, passed = judge(1e-3, INF, 1e-4)
    assert math.isnan(ratio) and not passed


def test_judge_bound_is_two_by_default_and_adjustable():
    assert BOUND == 2.0
    assert judge(2.5e-3, 1e-3, 0.0).passed is False
    assert judge(2.5e-3, 1e-3, 0.0, bound=4.0).passed is True


def test_compare_tensor_records_all_numbers():
    ref = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    kernel = torch.tensor([[1.0, -2.0 - 2**-9]])
    torch_path = torch.tensor([[1.0 + 2**-10, -2.0]])
    record = compare_tensor("out", kernel, torch_path, ref, "fp32")
    assert record == {"name": "out", "kernel_err": 2**-9, "torch_err": 2**-10, "floor": 4.0 * 2**-24,
                      "magnitude": 2.0, "ratio": 2.0, "nonfinite": 0, "passed": True}


def test_the_delta_noise_raises_the_floor_at_the_outputs_rounding():
    ref = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    record = compare_tensor("dk", ref.to(torch.bfloat16), ref, ref, "bf16", delta_noise=3.0)
    # M = 2: bf16's u at M + the noise, fp32's at M
    assert record["floor"] == 2**-8 * (2.0 + 3.0) + 2**-24 * 2.0 and record["delta_noise"] == 3.0


def test_the_accumulator_noise_raises_the_floor_at_fp32s_rounding():
    ref = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    record = compare_tensor("dq", ref.to(torch.float16), ref, ref, "fp16", accumulator_noise=5e3)
    # M = 2: fp16's u at M, fp32's at M + the noise
    assert record["floor"] == 2**-11 * 2.0 + 2**-24 * (2.0 + 5e3) and record["accumulator_noise"] == 5e3


# --- term sizes (conformance.judging.operators) ---------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_score_size_bounds_every_scaled_score_and_its_absolute_terms(seed):
    """The floor of lse and total counts the fp32 rounding of the score dot products; their
    declared size must be at least scale * sum_d |q_d * k_d| for every query/key pair."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, 17, 24, generator=generator) * (seed + 1)
    k = torch.randn(2, 3, 9, 24, generator=generator)
    terms = torch.einsum("bhid,bhjd->bhij", q.double().abs(), k.double().abs()) * 24**-0.5
    assert score_size(q, k) >= float(terms.max())
    assert score_size(q, k) <= 24**-0.5 * float(q.double().norm(dim=-1).max() * k.double().norm(dim=-1).max()) * 1.000001


def test_score_size_ignores_a_planted_non_finite_value():
    q, k = torch.ones(1, 1, 4, 16), torch.ones(1, 1, 4, 16)
    q[0, 0, 1, 3] = math.nan
    assert score_size(q, k) == pytest.approx(16**-0.5 * 4.0 * 4.0)


def test_lse_and_total_floors_use_the_score_size():
    case = Case.from_id("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq130,Sk61,lse,total,seed0]")
    inputs = make_inputs(case, "cpu").detached()
    sizes = OPERATORS["flash_attention"].term_sizes(case, inputs)
    assert sizes == {"lse": score_size(inputs["q"], inputs["k"]), "total": score_size(inputs["q"], inputs["k"])}
    assert OPERATORS["piecewise_attention"].term_sizes(case, inputs) == {}


def test_torch_err_is_the_larger_over_several_torch_paths():
    ref = torch.tensor([1.0, -2.0], dtype=torch.float64)
    kernel = torch.tensor([1.0, -2.0 - 2**-9])
    lucky, unlucky = torch.tensor([1.0, -2.0]), torch.tensor([1.0 + 2**-10, -2.0])
    record = compare_tensor("out", kernel, (lucky, unlucky), ref, "fp32")
    assert record["torch_err"] == 2**-10 and record["ratio"] == 2.0
    assert compare_tensor("out", kernel, lucky, ref, "fp32")["ratio"] > 1000
