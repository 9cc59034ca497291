"""The known-issue registry (conformance.robustness.known_issues): its scopes, what an entry
matches, and the runner's conversion of a matching case's verdict (xfail, xpass)."""

import textwrap

import pytest

from conformance.backends import INTERPRETER, cuda_profile
from conformance.cases.catalog import Case
from conformance.judging import verdicts
from conformance.robustness import known_issues
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case


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
