"""FlexAttention as a built-in implementation (conformance/peers/flex.py), on the CPU: Inductor
compiles flex to C++ there, forward only and without lse (torch's own limits, declared). Its
compiled kernels are judged; the eager math path is refused (an uncompiled call, or one past
dynamo's recompile limit, is `error`); compile time is reported apart from case time."""

import sys

import pytest
import torch

from conformance.cli import main
from conformance.peers import flex, flex_compile, sdpa
from conformance.reporting.compile_time import compile_time_table
from conformance.running.results import read_results

GQA_CAUSAL_FWD = "flash_attention.fwd[fp32,d16,causal,B1,H4,Hkv2,Sq9,Sk17,seed0]"
MQA_EMPTY_ROWS_FWD = "flash_attention.fwd[fp32,d16,causal,B1,H4,Hkv1,Sq17,Sk9,seed0]"
STRIDED_NONCAUSAL_FWD = "flash_attention.fwd[fp16,d32,noncausal,B1,H4,Hkv2,Sq64,Sk64,bshd,seed0]"
BWD = "flash_attention.bwd[fp32,d16,causal,B1,H4,Hkv1,Sq17,Sk9,seed0]"
LSE_FWD = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"


@pytest.fixture
def fresh_dynamo():
    """Compiled entries of earlier tests would make these tests' compilations cache hits."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def run(tmp_path, *case_ids, kernel="flash_attention=flex"):
    out = tmp_path / "run"
    argv = ["run", "--out", str(out), "--kernel", kernel]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    lines = [line for line in read_results(out) if line.get("kind") != "probe"]
    return code, {line["case"]: line for line in lines}, out


def test_flex_on_the_cpu_passes_forwards_and_declares_what_torch_refuses(tmp_path, fresh_dynamo):
    code, lines, out = run(tmp_path, GQA_CAUSAL_FWD, MQA_EMPTY_ROWS_FWD, STRIDED_NONCAUSAL_FWD, BWD, LSE_FWD)
    assert code == 0
    launched = (GQA_CAUSAL_FWD, MQA_EMPTY_ROWS_FWD, STRIDED_NONCAUSAL_FWD)
    assert [lines[case]["verdict"] for case in launched] == ["pass"] * 3
    assert lines[BWD]["reason"] == ("declared capabilities: direction bwd not in [fwd] "
                                    "(torch: \"FlexAttention does not support backward on CPU\")")
    assert lines[LSE_FWD]["reason"].startswith("declared capabilities: no log-normalizer output (torch:")
    for line in lines.values():
        assert line["implementation"] == "flex" and "--kernel flash_attention=flex" in line["reproduce"]
        assert line["duration_s"] >= line["compile_s"] >= 0
    for case in launched:  # each shape compiled once, inside the case's time
        assert lines[case]["compilations"] >= 1 and lines[case]["compile_s"] > 0
    assert lines[BWD]["compilations"] == 0
    summary = (out / "summary.md").read_text()
    assert "## Compile time (torch.compile), apart from case time" in summary and "| `flex` " in summary


def test_past_the_recompile_limit_a_case_is_error_not_the_eager_path(tmp_path, fresh_dynamo, monkeypatch):
    monkeypatch.setattr(flex_compile, "RECOMPILE_LIMIT", 1)
    code, lines, _ = run(tmp_path, MQA_EMPTY_ROWS_FWD, GQA_CAUSAL_FWD)  # the first compiles, the second would
    assert code == 1
    assert lines[MQA_EMPTY_ROWS_FWD]["verdict"] == "pass"
    assert lines[GQA_CAUSAL_FWD]["verdict"] == "error"
    assert lines[GQA_CAUSAL_FWD]["reason"].startswith(
        "EagerFallback: flex_attention hit dynamo's recompile limit (1): past it it would run its eager math path")


def test_an_uncompiled_call_is_refused(fresh_dynamo):
    q = torch.randn(1, 2, 8, 16)
    attention = flex.adapter("flash_attention", "")
    with torch.compiler.set_stance("force_eager"), pytest.raises(flex_compile.EagerFallback, match="ran uncompiled"):
        attention(q, q, q, causal=True)


def test_the_mask_mod_is_the_operators_bottom_right_causal_mask():
    for seq_q, seq_k in ((2, 3), (3, 2), (4, 4), (1, 5)):
        mask_mod = flex.bottom_right_causal(seq_q, seq_k)
        rows, columns = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
        assert torch.equal(mask_mod(0, 0, rows, columns), sdpa.bottom_right_mask(seq_q, seq_k, "cpu"))


def test_the_declaration_follows_the_device_and_the_torch():
    cpu, cuda = flex.capabilities("cpu"), flex.capabilities("cuda")
    assert (cpu["directions"], cpu["lse"]) == (["fwd"], False)
    assert "directions" not in cuda and "lse" not in cuda
    for declared in (cpu, cuda):
        assert declared["dtypes"] == ["fp16", "bf16", "fp32"]
        assert (declared["total"], declared["dropout"]) == (False, False)
        assert declared["head_dims"] == [16, 32, 64, 96, 128, 192, 256]
        assert "fp8 inputs give fp8 outputs, the operator's fp8 forward returns fp16" in declared["reasons"]["dtypes"]


def test_a_torch_that_takes_powers_of_two_only_declares_those(monkeypatch):
    monkeypatch.setattr(flex.load_flex(), "_supported_head_dim", lambda dim: True, raising=False)
    declared = flex.capabilities("cuda")
    assert declared["head_dims"] == [16, 32, 64, 128, 256]
    assert declared["reasons"]["head_dims"].endswith("powers of two only in this torch")


def test_the_dynamo_settings_make_the_limit_a_hard_failure(monkeypatch):
    monkeypatch.setattr(flex_compile, "RECOMPILE_LIMIT", 77)
    assert flex_compile.hard_recompile_limit() == {"recompile_limit": 77, "accumulated_recompile_limit": 77,
                                            "fail_on_recompile_limit_hit": True}


def test_without_flex_attention_the_kernel_is_one_usage_error(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, flex.MODULE, None)  # import fails as on torch < 2.5
    monkeypatch.setattr(flex, "_flex", None)
    assert main(["run", "--case", GQA_CAUSAL_FWD, "--out", "/nonexistent/never", "--kernel",
                 "flash_attention=flex"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("conformance: error: argument --kernel: cannot load flash_attention=flex")
    assert f"flex needs torch >= 2.5 (torch.nn.attention.flex_attention); this is torch {torch.__version__}" in err


@pytest.mark.parametrize("kernel, words", [
    ("flash_attention=flex:fast", "flex takes no variant, got flex:fast"),
    ("piecewise_attention=flex", "flex implements flash_attention, flash_attention_varlen, kv_cache_attention only, not piecewise_attention"),
    ("flash_attention=flux", "expected op=package.module:function (or a built-in: op=sdpa:BACKEND, op=flex)"),
])
def test_bad_flex_specs_are_one_usage_error(capsys, kernel, words):
    assert main(["run", "--case", GQA_CAUSAL_FWD, "--out", "/nonexistent/never", "--kernel", kernel]) == 2
    err = capsys.readouterr().err
    assert err.startswith("conformance: error: argument --kernel") and words in err and err.count("\n") == 1


def test_the_compile_time_table_adds_up_per_implementation():
    lines = [{"implementation": "flex", "compile_s": 3.0, "compilations": 2, "duration_s": 4.0},
             {"implementation": "flex", "compile_s": 0.0, "compilations": 0, "duration_s": 1.0},
             {"implementation": "kernels:flash_attention", "duration_s": 9.0},
             {"kind": "compile", "implementation": "flex", "compile_s": 5.0}]
    headers, rows = compile_time_table(lines)
    assert headers[:4] == ["implementation", "cases", "compilations", "compile s"]
    assert rows == [["flex", 2, 2, "3.0", "5.0", "60%"]]
