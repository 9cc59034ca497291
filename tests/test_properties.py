"""Property-based search (hypothesis) over cases and input value distributions.

The property: the bundled kernels pass the rule on any valid case, under any of
the value distributions. The profile comes from FA_HYPOTHESIS_PROFILE: `ci` (the
default; derandomized, a few small examples, part of `nox -s tests`) or `nightly`:

    FA_HYPOTHESIS_PROFILE=nightly python -m pytest -p no:cacheprovider tests/test_properties.py

A failing example is shrunk to a minimal case and printed with its reproducer.
"""

import pytest
import torch
from hypothesis import given, settings

from conformance import backends
from conformance.cases import strategies
from conformance.cases.catalog import Case
from conformance.cases.distributions import Distribution
from conformance.cases.inputs import TORCH_DTYPES, make_inputs
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case

ACCEPTED = ("pass", "unsupported")
BUNDLED = Implementations()
SIZES = strategies.profile_sizes()
FINDINGS = "reports/flake-cpu/findings.md"


def judged(case: Case, distribution=None, implementations: Implementations = BUNDLED) -> dict:
    return run_case(case, backends.active_profile(), implementations, distribution=distribution)


def assert_rule_holds(line: dict) -> None:
    if line["verdict"] not in ACCEPTED:
        raise AssertionError(strategies.reproducer(line))


@strategies.profile_settings()
@given(strategies.cases_with_distributions(**SIZES))
def test_the_bundled_kernels_pass_on_any_case(example):
    case, distribution = example
    assert_rule_holds(judged(case, distribution))


@strategies.profile_settings()
@given(strategies.masked_row_cases(ops=("flash_attention",), **SIZES))
def test_rows_that_see_no_key_pass(case):
    assert case.causal and case.seq_q > case.seq_k
    assert_rule_holds(judged(case))


@strategies.profile_settings()
@given(strategies.variant_cases(head_dims=SIZES["head_dims"], max_seq=SIZES["max_seq"], max_batch=SIZES["max_batch"],
                                max_heads=SIZES["max_heads"]))
def test_the_bundled_kernels_pass_on_any_variant(case):
    """Any window, softcap and ALiBi slopes, on dense and packed batches, both directions."""
    assert_rule_holds(judged(case))


@strategies.profile_settings()
@given(strategies.kv_cache_cases(head_dims=SIZES["head_dims"], max_seq=SIZES["max_seq"],
                                 max_batch=SIZES["max_batch"] + 1, max_heads=SIZES["max_heads"]))
def test_the_bundled_kv_cache_kernel_passes_on_any_cache(case):
    """Any page size, table order, split count, append and cache lengths of kv_cache_attention."""
    assert_rule_holds(judged(case))


def test_a_wrong_kernel_is_found_and_shrunk_to_a_minimal_reproducer():
    """A causal mask aligned top-left instead of bottom-right is wrong only when Sq != Sk;
    the search must find that and shrink it to one query and two keys (or the reverse)."""
    wrong = Implementations.from_specs(["flash_attention=tests.fake_kernels:causal_top_left"])

    @settings(derandomize=True, database=None, deadline=None, max_examples=200)
    @given(strategies.cases(ops=("flash_attention",), directions=("fwd",), dtypes=("fp32",), head_dims=(16,),
                            max_seq=32, extras=False))
    def wrong_kernel_passes(case):
        line = judged(case, implementations=wrong)
        assert line["verdict"] in ACCEPTED, strategies.reproducer(line)

    with pytest.raises(AssertionError) as failure:
        wrong_kernel_passes()
    report = str(failure.value)
    shrunk = Case.from_id(report.splitlines()[0].removeprefix("case: "))
    assert shrunk.causal and sorted((shrunk.seq_q, shrunk.seq_k)) == [1, 2]
    assert (shrunk.batch, shrunk.heads, shrunk.kv_heads, shrunk.seed) == (1, 1, 1, 0)
    assert "verdict: fail: out ratio" in report
    assert f"reproduce: python -m conformance run --case '{shrunk.id}' " \
           "--kernel flash_attention=tests.fake_kernels:causal_top_left" in report


@pytest.mark.parametrize("dtype", strategies.DTYPES)
@pytest.mark.parametrize("kind", sorted(strategies.PARAMETER_EXPONENTS))
def test_the_largest_parameters_keep_inputs_finite(kind, dtype):
    """At each distribution's bounds the inputs (and the fp32 scores of large logits) stay finite."""
    case = Case("flash_attention", "bwd", dtype, 256, False, 1, 2, 2, 64, 64)
    for exponent in strategies.PARAMETER_EXPONENTS[kind][dtype]:
        made = make_inputs(case, "cpu", distribution=Distribution(kind, 2.0**exponent))
        tensors = [*made.detached().values(), made.do]
        assert all(torch.isfinite(t).all() for t in tensors)
        scores = made.q.detach().float() @ made.k.detach().float().transpose(-1, -2)
        assert torch.isfinite(scores).all() and scores.dtype == torch.float32
        assert all(t.dtype == TORCH_DTYPES[dtype] for t in tensors)


def test_masked_row_cases_always_have_empty_rows():
    @settings(derandomize=True, database=None, max_examples=50)
    @given(strategies.masked_row_cases(max_seq=8))
    def check(case):
        assert case.causal and case.seq_q > case.seq_k

    check()


def test_packed_inputs_keep_the_operator_order():
    """Found by the search: packing piecewise inputs by sequence length (q1, q2 | k1, k2, v)
    reordered them, so the gradients of a Sq != Sk case were matched to the wrong inputs."""
    kinds = {"q1": "q", "k1": "kv", "q2": "q", "k2": "kv", "v": "kv"}
    case = Case("piecewise_attention", "bwd", "fp16", 16, True, 2, 4, 1, 74, 29, layout="packed", dist=0)
    assert list(make_inputs(case, "cpu", kinds).tensors) == list(kinds)


@pytest.mark.parametrize("case_id", [
    "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq130,Sk61,lse,seed8]",  # flake run: lse 2.03 (A.1)
    "flash_attention.fwd[fp32,d16,causal,B1,H3,Hkv3,Sq34,Sk7,lse,dropout0.5,seed146]",  # out 2.38 (A.2)
    "flash_attention.fwd[fp32,d96,causal,B1,H7,Hkv7,Sq2,Sk5,seed0]",  # nightly search: out 2.01 (A.2)
    "flash_attention.bwd[fp32,d16,causal,B1,H2,Hkv1,Sq2,Sk1,dropout0.1,seed42]",  # dq 3.70 (B)
    "flash_attention.bwd[fp32,d64,noncausal,B1,H2,Hkv2,Sq50,Sk1,seed3]",  # dq 2.63 (B)
    "flash_attention.bwd[fp32,d192,causal,B2,H8,Hkv1,Sq2,Sk8,dropout0.1,seed4832]",  # nightly: dk 2.2 (D)
])
def test_the_former_false_alarms_pass(case_id):
    """The false alarms of correct kernels found by the flake check and this search
    (reports/flake-cpu/findings.md) were closed by the rule's floor and its second
    torch summation order (conformance.judging.rule), and D by the interpreter's in-order fp32
    dot (kernels.blocks.mma): each of them passes now."""
    line = judged(Case.from_id(case_id))
    assert line["verdict"] == "pass", strategies.reproducer(line)


def test_the_false_alarm_at_peers_input_scale_passes():
    """Finding E (reports/flake-cpu/findings.md): an MQA decode backward in bf16 at inputs x4
    failed dK at 2.11 on the H100 and here, both paths several ulps off through delta's
    read of the rounded output; the floor's delta noise (reference/delta_noise.py) covers it."""
    case = Case.from_id("flash_attention.bwd[bf16,d32,causal,B2,H8,Hkv1,Sq1,Sk1000,seed0]")
    line = judged(case, Distribution("scaled", 4.0))
    assert line["verdict"] == "pass", strategies.reproducer(line)
    (dk,) = [tensor for tensor in line["tensors"] if tensor["name"] == "dk"]
    assert dk["delta_noise"] > dk["magnitude"]  # the noise, not the result's size, sets the floor here


@pytest.mark.parametrize("seed", [3, 4, 6, 9, 12])
def test_the_false_alarms_of_exact_zero_gradients_at_inputs_x10_pass(seed):
    """Finding F: with one key per row every gradient but dV is exactly 0, and both paths
    return the fp32 noise of dP - delta, which at inputs x10 outgrew the fixed allowance
    (ratios 2.05-5.4 on the interpreter); the floor's accumulator noise covers it."""
    case = Case.from_id(f"flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq50,Sk1,seed{seed}]")
    line = judged(case, Distribution("scaled", 10.0))
    assert line["verdict"] == "pass", strategies.reproducer(line)
    for tensor in line["tensors"]:
        if tensor["name"] in ("dq", "dk"):
            assert tensor["magnitude"] == 0.0 and tensor["floor"] > 3 * 0.3 * 2**-11  # not MIN_MAGNITUDE's


@pytest.mark.parametrize("case_id, distribution", [
    ("flash_attention.bwd[fp32,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed6]", Distribution("logits", 64.0)),
    ("flash_attention.bwd[fp32,d16,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed7]", Distribution("outliers", 16.0)),
])
def test_the_fp32_backward_at_large_logits_passes(case_id, distribution):
    """Finding G: the interpreter's fp32 dot rounded every product before summing, so its
    scores were 2x noisier than an MMA's and dQ/dK 2.2-2.5x torch's; kernels.blocks.mma now
    sums exact products (as an MMA's fused multiply-adds do) and rounds once."""
    line = judged(Case.from_id(case_id), distribution)
    assert line["verdict"] == "pass", strategies.reproducer(line)
    assert max(tensor["ratio"] for tensor in line["tensors"]) < 1.6
