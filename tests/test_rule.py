"""The comparison rule, its helpers, and the known-issue registry that converts verdicts."""

import math
import textwrap

import pytest
import torch

from conformance.backends import INTERPRETER, cuda_profile
from conformance.cases.catalog import Case
from conformance.cases.inputs import make_inputs
from conformance.judging import verdicts
from conformance.judging.operators import OPERATORS, score_size
from conformance.judging.rule import BOUND, compare_tensor, floor, judge, max_abs_error, nonfinite_mismatch
from conformance.robustness import known_issues
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case

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


# --- known issues -------------------------------------------------------------------

CASE = Case.from_id("flash_attention.bwd[bf16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]")


def write_registry(tmp_path, text):
    path = tmp_path / "known_issues.toml"
    path.write_text(textwrap.dedent(text))
    return known_issues.load_registry(path)


def entry(tmp_path, scope_lines):
    registry = write_registry(tmp_path, f"""
        [[issue]]
        id = "demo"
        description = "demo issue"
        reason = "https://example.invalid/issue/1"
        [issue.scope]
        {scope_lines}
        """)
    return registry


def test_bundled_registry_holds_only_narrowly_scoped_entries():
    """Each bundled entry names its backend, arch and dtype (or probes), or the peer implementation
    it is about and a trait of the failing cases: none may widen to every case or every kernel."""
    registry = known_issues.load_registry()
    assert [issue.id for issue in registry] == [
        "sm90-fp8-mma-accumulation", "sm90-fp8-mma-probes", "sdpa-cudnn-fully-masked-rows",
        "sdpa-flash-inf-row-backward", "sdpa-flash-gqa-dk-rounded-per-head", "flex-causal-single-key-lowering",
        "flex-grid-batch-heads"]
    for issue in registry:
        assert issue.reason
        if "implementation" in issue.scope:
            assert all(name.startswith("sdpa:") or name == "flex" for name in issue.scope["implementation"])
            assert len(issue.scope) >= 2
        else:
            assert {"backend", "arch", "probe" if issue.covers_probes else "dtype"} <= set(issue.scope)


def test_the_bundled_fp8_probe_entry_covers_the_fp8_dots_on_an_h100_only():
    h100 = cuda_profile((9, 0))
    for probe_id in ("probe.dot[fp8e4m3]", "probe.dot[fp8e5m2]"):
        assert known_issues.match_probe(probe_id, h100, "3.6.0").id == "sm90-fp8-mma-probes"
        assert known_issues.match_probe(probe_id, cuda_profile((8, 9)), "3.6.0") is None
        assert known_issues.match_probe(probe_id, INTERPRETER, "3.6.0") is None
    assert known_issues.match_probe("probe.upcast[fp8e4m3]", h100, "3.6.0") is None
    fp8_case = Case.from_id("flash_attention.fwd[fp8e4m3,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,seed0]")
    assert known_issues.match(fp8_case, h100, "3.6.0") is None  # a probe entry never covers a case


def test_an_entry_without_scope_matches_everything(tmp_path):
    registry = write_registry(tmp_path, """
        [[issue]]
        id = "all"
        description = "everything"
        reason = "test"
        """)
    assert known_issues.match(CASE, INTERPRETER, "3.9.0", registry=registry).id == "all"


@pytest.mark.parametrize(
    "scope, matches",
    [
        ('backend = "interpreter"', True),
        ('backend = "interpreter:cpu"', True),
        ('backend = "cuda"', False),
        ('arch = ["cpu", "sm_90"]', True),
        ('dtype = "bf16"', True),
        ('dtype = ["fp16", "fp32"]', False),
        ('direction = "fwd"', False),
        ("head_dim = [64, 128]", True),
        ("head_dim = 128", False),
        ("causal = true", True),
        ("causal = false", False),
        ('op = "flash_attention"', True),
        ('implementation = "kernels:flash_attention"', True),
        ('implementation = "mine:fa"', False),
        ('triton = ">=3.2,<3.10"', True),
        ('triton = "<3.9"', False),
        ('backend = "interpreter"\ndtype = "bf16"\nhead_dim = 32', False),
        ('layout = "bhsd"', True),
        ('layout = ["bshd", "packed"]', False),
        ("seq_q = 77\nseq_k = 133\nbatch = 1\nheads = 2\nkv_heads = 2", True),
        ("kv_heads = 1", False),
        ('seq_k = ">=128"', True),
        ('seq_k = ">=1024,<8192"', False),
        ('seq_q = ["<10", ">70,<=77"]', True),
        ('head_dim = [">=192", 64]', True),
        ('head_dim = "!=64"', False),
        ('feature = ["dropout", "lse"]', False),
    ],
)
def test_match_by_scope(tmp_path, scope, matches):
    registry = entry(tmp_path, scope)
    found = known_issues.match(CASE, INTERPRETER, "3.9.0", "kernels:flash_attention", registry=registry)
    assert (found is not None) is matches


@pytest.mark.parametrize(
    "case_id, features",
    [
        ("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,lse,total,seed0]", {"lse", "total"}),
        ("flash_attention.bwd[bf16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,dropout0.1,seed0]", {"dropout"}),
        ("flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,packed,seed0]", {"layout"}),
        ("piecewise_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,dist24,seed0]", {"dist"}),
    ],
)
def test_match_by_feature(tmp_path, case_id, features):
    case = Case.from_id(case_id)
    assert known_issues.case_features(case) == features
    for feature in known_issues.FEATURE_NAMES:  # one folder each: registries are cached by path
        (tmp_path / feature).mkdir()
        registry = entry(tmp_path / feature, f'feature = "{feature}"')
        assert (known_issues.match(case, INTERPRETER, "3.9.0", registry=registry) is not None) is (feature in features)
    registry = entry(tmp_path, 'feature = "dropout"\nlayout = "bhsd"\nseq_k = ">=133"')
    assert (known_issues.match(case, INTERPRETER, "3.9.0", registry=registry) is not None) is (features == {"dropout"})


@pytest.mark.parametrize(
    "scope, probe_id, matches",
    [
        ('probe = "probe.dot[bf16]"', "probe.dot[bf16]", True),
        ('probe = ["probe.dot[fp16]", "probe.cast[bf16]"]', "probe.cast[bf16]", True),
        ('probe = "probe.dot[bf16]"', "probe.dot[fp16]", False),
        ('probe = "probe.dot[bf16]"\nbackend = "interpreter:cpu"\narch = "cpu"', "probe.dot[bf16]", True),
        ('probe = "probe.dot[bf16]"\nbackend = "cuda"', "probe.dot[bf16]", False),
        ('probe = "probe.dot[bf16]"\narch = "sm_90"', "probe.dot[bf16]", False),
        ('probe = "probe.dot[bf16]"\ntriton = ">=3.2,<3.10"', "probe.dot[bf16]", True),
        ('probe = "probe.dot[bf16]"\ntriton = "<3.9"', "probe.dot[bf16]", False),
        ('backend = "interpreter"', "probe.dot[bf16]", False),  # no `probe`: cases only
        ("", "probe.dot[bf16]", False),
    ],
)
def test_match_probe_by_scope(tmp_path, scope, probe_id, matches):
    registry = entry(tmp_path, scope)
    assert (known_issues.match_probe(probe_id, INTERPRETER, "3.9.0", registry=registry) is not None) is matches


def test_an_entry_scoped_by_probe_never_matches_a_case(tmp_path):
    (issue,) = entry(tmp_path, 'probe = "probe.dot[bf16]"\nbackend = "interpreter"')
    assert issue.covers_probes and not issue.matches(CASE, INTERPRETER, "3.9.0")
    assert known_issues.match(CASE, INTERPRETER, "3.9.0", registry=(issue,)) is None
    assert issue.record()["scope"] == {"probe": ["probe.dot[bf16]"], "backend": ["interpreter"]}


def test_known_issue_record_keeps_the_scope_as_written(tmp_path):
    (issue,) = entry(tmp_path, 'feature = "dropout"\nseq_k = ">=16384"\nhead_dim = [64, 128]')
    assert issue.record()["scope"] == {"feature": ["dropout"], "seq_k": [">=16384"], "head_dim": [64, 128]}


def test_triton_range_handles_local_versions_and_missing_triton(tmp_path):
    registry = entry(tmp_path, 'triton = ">=3.6,<3.7"')
    profile = cuda_profile((9, 0))
    assert known_issues.match(CASE, profile, "3.6.0+git1a2b3c", registry=registry) is not None
    assert known_issues.match(CASE, profile, "3.7.0", registry=registry) is None
    assert known_issues.match(CASE, profile, None, registry=registry) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\ndtpye = "bf16"\n', "unknown scope keys"),
        ('[[issue]]\nid = "x"\ndescription = "d"\n', "'reason' must be"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\ntriton = "3.x"\n', "triton version"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n' * 2, "duplicate"),
        ('[issue]\nid = "x"\n', "must be \\[\\[issue\\]\\] tables"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nfeature = "gqa"\n', "unknown feature 'gqa'"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nseq_k = "16k"\n', "bad integer range"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nseq_k = "=>16"\n', "bad integer range"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nbatch = 1.5\n', "integers or ranges"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nprobe = "probe.dot[fp64]"\n',
         "unknown probe 'probe.dot\\[fp64\\]'"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nprobe = ["probe.dot[bf16]", "dot[bf16]"]\n',
         "unknown probe 'dot\\[bf16\\]'"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nprobe = "probe.dot[bf16]"\ndtype = "bf16"\n',
         "case scope keys \\['dtype'\\] cannot go with 'probe'"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nprobe = "probe.dot[bf16]"\n'
         'op = "flash_attention"\nfeature = "lse"\n', "case scope keys \\['feature', 'op'\\] cannot go with 'probe'"),
        ('[[issue]]\nid = "x"\ndescription = "d"\nreason = "r"\n[issue.scope]\nprobe = "probe.dot[bf16]"\n'
         'implementation = "kernels:flash_attention"\n', "cannot go with 'probe'"),
    ],
)
def test_malformed_registry_is_rejected(tmp_path, text, message):
    with pytest.raises((ValueError, TypeError), match=message):
        write_registry(tmp_path, text)


@pytest.mark.parametrize(
    "verdict, converted",
    [
        (verdicts.PASS, verdicts.XPASS),
        (verdicts.FAIL, verdicts.XFAIL),
        (verdicts.NONFINITE, verdicts.XFAIL),
        (verdicts.ERROR, verdicts.XFAIL),
        (verdicts.UNSUPPORTED, verdicts.UNSUPPORTED),
    ],
)
def test_known_issue_conversion(tmp_path, verdict, converted):
    issue = entry(tmp_path, "")[0]
    assert known_issues.apply_known_issue(verdict, issue) == converted
    assert known_issues.apply_known_issue(verdict, None) == verdict


@pytest.mark.parametrize("fake, verdict", [("exact", verdicts.XPASS), ("scale_off", verdicts.XFAIL)])
def test_runner_applies_known_issues(tmp_path, fake, verdict):
    case = Case.from_id("flash_attention.fwd[fp32,d16,noncausal,B1,H2,Hkv1,Sq9,Sk17,seed0]")
    registry = entry(tmp_path, 'dtype = "fp32"')
    implementations = Implementations.from_specs([f"flash_attention=tests.fake_kernels:{fake}"])
    line = run_case(case, INTERPRETER, implementations, registry=registry)
    assert line["verdict"] == verdict
    assert line["known_issue"]["id"] == "demo"
    assert line["rule_verdict"] == (verdicts.PASS if fake == "exact" else verdicts.FAIL)


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


@pytest.mark.parametrize("scope, case_id, matches", [
    ('empty_rows = true', "flash_attention.bwd[fp16,d64,causal,B1,H4,Hkv4,Sq1024,Sk509,seed0]", True),
    ('empty_rows = true', "flash_attention.bwd[fp16,d64,noncausal,B1,H4,Hkv4,Sq1024,Sk509,seed0]", False),
    ('empty_rows = true', "flash_attention.bwd[fp16,d64,causal,B1,H4,Hkv4,Sq509,Sk1024,seed0]", False),
    ('grouped = true', "flash_attention.bwd[fp16,d64,causal,B1,H8,Hkv2,Sq509,Sk1024,seed0]", True),
    ('grouped = false', "flash_attention.bwd[fp16,d64,causal,B1,H8,Hkv2,Sq509,Sk1024,seed0]", False),
    ('bad_input = "inf"', "flash_attention.bwd[fp16,d64,causal,B1,H8,Hkv2,Sq509,Sk1024,inf,seed0]", True),
    ('bad_input = "inf"', "flash_attention.bwd[fp16,d64,causal,B1,H8,Hkv2,Sq509,Sk1024,nan,seed0]", False),
])
def test_derived_scope_keys(tmp_path, scope, case_id, matches):
    (issue,) = entry(tmp_path, scope)
    assert issue.matches(Case.from_id(case_id), cuda_profile((9, 0)), "3.6.0") is matches


def test_derived_scope_keys_take_booleans(tmp_path):
    with pytest.raises(ValueError, match="empty_rows takes true or false"):
        entry(tmp_path, 'empty_rows = "yes"')
