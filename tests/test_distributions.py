"""Value distributions of the inputs: specs, what each does to the draws, and the run option."""

import math

import pytest
import torch

from conformance.cases.catalog import Case
from conformance.cases.distributions import INPUT_ROLES, Distribution, input_role, parse_optional
from conformance.cases.inputs import make_inputs
from conformance.cases.tiers import DOMINANT, NEGATIVE, cases
from conformance.cli import main
from conformance.judging.operators import OPERATORS
from conformance.running.results import read_results
from tests.test_cli import run_cli

CASE = Case("flash_attention", "bwd", "fp32", 16, True, 1, 2, 1, 40, 50, seed=3)
PIECEWISE = {"q1": "q", "k1": "kv", "q2": "q", "k2": "kv", "v": "kv"}


def inputs(case=CASE, spec=None, kinds=None):
    distribution = Distribution.parse(spec) if spec else None
    made = make_inputs(case, "cpu", kinds, distribution)
    return {**made.detached(), "do": made.do}


@pytest.mark.parametrize("spec", ["normal", "scaled:0.001", "logits:1e+06", "outliers:64", "nearconst:0.25",
                                  "negative:1000"])
def test_specs_round_trip(spec):
    assert Distribution.parse(spec).spec == spec


@pytest.mark.parametrize("spec, problem", [
    ("gaussian", "unknown distribution 'gaussian'"),
    ("scaled", "needs parameter"),
    ("normal:2", "takes no parameter"),
    ("logits:x", "is not a number"),
    ("outliers:-4", "positive and finite"),
    ("scaled:inf", "positive and finite"),
])
def test_bad_specs_name_the_problem(spec, problem):
    with pytest.raises(ValueError, match=problem):
        Distribution.parse(spec)


def test_no_distribution_and_normal_leave_the_catalog_inputs_alone():
    assert parse_optional(None) is None and parse_optional("normal") is None
    plain, normal = inputs(), inputs(spec="normal")
    assert all(torch.equal(plain[name], normal[name]) for name in plain)


def test_scaled_multiplies_every_tensor():
    plain, scaled = inputs(), inputs(spec="scaled:0.125")
    assert all(torch.equal(scaled[name], plain[name] * 0.125) for name in plain)  # a power of two: exact


def test_logits_scale_q_and_k_only():
    plain, shaped = inputs(), inputs(spec="logits:256")
    assert torch.equal(shaped["q"], plain["q"] * 16) and torch.equal(shaped["k"], plain["k"] * 16)
    assert torch.equal(shaped["v"], plain["v"]) and torch.equal(shaped["do"], plain["do"])
    scores = (shaped["q"] @ shaped["k"].transpose(-1, -2)) / math.sqrt(CASE.head_dim)
    assert 150 < float(scores.std()) < 400  # softmax inputs of standard deviation about L


def test_outliers_are_sparse_and_exactly_the_magnitude():
    plain, shaped = inputs(), inputs(spec="outliers:64")
    for name in plain:
        changed = shaped[name] != plain[name]
        assert 1 <= int(changed.sum()) < plain[name].numel() // 16
        assert torch.equal(shaped[name][changed].abs(), torch.full_like(shaped[name][changed], 64.0))


def test_near_constant_keys_make_near_constant_scores():
    shaped = inputs(spec="nearconst:0.001")
    keys = shaped["k"]
    assert float((keys - keys[..., :1, :]).abs().max()) < 0.01
    assert torch.equal(shaped["q"], inputs()["q"])


def test_negative_puts_every_softmax_input_far_below_zero():
    plain, shaped = inputs(), inputs(spec="negative:1000")
    scores = (shaped["q"] @ shaped["k"].transpose(-1, -2)) / math.sqrt(CASE.head_dim)
    assert float(scores.max()) < -800 and float(scores.min()) > -1200
    assert float(scores.std(dim=-1).min()) > 1  # rows are not constant
    assert torch.equal(shaped["v"], plain["v"]) and torch.equal(shaped["q"][..., :-1], plain["q"][..., :-1])


def test_piecewise_inputs_are_shaped_by_their_role():
    case = Case("piecewise_attention", "fwd", "fp32", 16, False, 1, 2, 2, 30, 30, dist=4)
    plain, shaped = inputs(case, kinds=PIECEWISE), inputs(case, "logits:4", PIECEWISE)
    for name in ("q1", "k1", "q2", "k2"):
        assert torch.equal(shaped[name], plain[name] * 2)
    assert torch.equal(shaped["v"], plain["v"])


def test_negative_pushes_both_piecewise_score_products():
    """Whichever product a pair (i, j) takes, q1.k1 near or q2.k2 far, its softmax input is about -L."""
    case = Case("piecewise_attention", "bwd", "fp32", 16, False, 1, 2, 2, 30, 40, dist=4)
    shaped = inputs(case, "negative:1000", PIECEWISE)
    for query, key in (("q1", "k1"), ("q2", "k2")):
        scores = (shaped[query] @ shaped[key].transpose(-1, -2)) / math.sqrt(case.head_dim)
        assert float(scores.max()) < -800 and float(scores.min()) > -1200, (query, key)
    assert torch.equal(shaped["v"], inputs(case, kinds=PIECEWISE)["v"])


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_every_input_of_every_operator_has_a_role(op):
    """Roles come from the operator's declared inputs: each is a query, key or value, and
    the scores (queries and keys) are there for logits, nearconst and negative to shape."""
    roles = [input_role(name) for name in OPERATORS[op].inputs]
    assert set(roles) <= set(INPUT_ROLES) and {"q", "k"} <= set(roles)


def test_an_input_without_a_role_is_refused_not_left_alone():
    with pytest.raises(ValueError, match="'bias' has no distribution role"):
        Distribution.parse("logits:4").apply({"q": torch.ones(2, 2), "bias": torch.ones(2, 2)}, None, 0)
    values = {"bias": torch.ones(2, 2)}
    assert Distribution.parse("normal").apply(values, None, 0)[0] is values  # the default touches nothing


@pytest.mark.parametrize("tier, specs", [("smoke", {NEGATIVE}), ("standard", {NEGATIVE, DOMINANT})])
def test_every_operator_meets_the_adversarial_distributions(tier, specs):
    for op in OPERATORS:
        shaped = [case for case in cases(tier) if case.op == op and case.values is not None]
        assert {case.values for case in shaped if not case.softcap} == specs, op
        # softcap is judged where it bites: large logits (issue 33), in smoke too
        assert {case.values for case in shaped if case.softcap} <= {DOMINANT}, op
        directions = {case.direction for case in cases(tier) if case.op == op}  # kv_cache_attention: fwd only
        assert {case.direction for case in shaped if case.values == NEGATIVE} == directions, op


def test_a_piecewise_run_draws_and_judges_under_the_distribution(tmp_path):
    case_id = "piecewise_attention.fwd[fp16,d16,noncausal,B1,H2,Hkv1,Sq9,Sk17,dist4,seed0]"
    out = tmp_path / "run"
    argv = ["run", "--out", str(out), "--op", "piecewise_attention", "--case", case_id,
            "--distribution", "negative:1000"]
    assert main(argv) == 0
    (line,) = [line for line in read_results(out) if line.get("kind", "case") == "case"]
    assert line["case"] == case_id and line["verdict"] == "pass" and line["distribution"] == "negative:1000"
    assert [tensor["name"] for tensor in line["tensors"]] == ["out"]
    assert line["reproduce"].endswith("--distribution negative:1000")


def test_a_run_records_its_distribution_and_reproduces_it(tmp_path):
    case_id = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
    code, lines, _ = run_cli(tmp_path, "exact", case_id, extra=["--distribution", "logits:1024"])
    (line,) = [line for line in lines if line.get("kind", "case") == "case"]
    assert code == 0 and line["verdict"] == "pass"
    assert line["distribution"] == "logits:1024"
    assert line["reproduce"].endswith("--kernel flash_attention=tests.fake_kernels:exact --distribution logits:1024")


@pytest.mark.parametrize("argv, message", [
    (["--distribution", "gaussian"], "argument --distribution: 'gaussian': unknown distribution 'gaussian'"),
    (["--seeds", "0"], "argument --seeds: must be at least 1, got 0"),
])
def test_bad_run_options_are_usage_errors(capsys, argv, message):
    assert main(["run", "--case", "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]", *argv]) == 2
    assert message in capsys.readouterr().err
