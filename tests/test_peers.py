"""Judging other implementations: the SDPA adapters (conformance/peers/sdpa.py) on the CPU,
and the command line's answers to a bad --kernel, --capabilities or --dropout-mask."""

import pytest
import torch

from conformance.cli import main
from conformance.peers import sdpa
from conformance.running.capabilities import NotSupported
from conformance.running.results import read_env, read_results

GQA_CAUSAL_FWD = "flash_attention.fwd[fp32,d16,causal,B1,H4,Hkv2,Sq9,Sk17,seed0]"
MQA_EMPTY_ROWS_BWD = "flash_attention.bwd[fp32,d16,causal,B1,H4,Hkv1,Sq17,Sk9,seed0]"
SQUARE_FWD = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq16,Sk16,seed0]"
LSE_FWD = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"




def run(tmp_path, kernel: str, *case_ids, extra=()):
    out = tmp_path / "run"
    argv = ["run", "--out", str(out), "--kernel", kernel, *extra]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    lines = [line for line in read_results(out) if line.get("kind") != "probe"] if out.exists() else []
    return code, {line["case"]: line for line in lines}, out


def test_sdpa_math_passes_gqa_bottom_right_causal_and_empty_rows(tmp_path):
    code, lines, out = run(tmp_path, "flash_attention=sdpa:math", GQA_CAUSAL_FWD, MQA_EMPTY_ROWS_BWD, LSE_FWD)
    assert code == 0
    assert lines[GQA_CAUSAL_FWD]["verdict"] == lines[MQA_EMPTY_ROWS_BWD]["verdict"] == "pass"
    assert lines[LSE_FWD]["verdict"] == "unsupported"
    assert lines[LSE_FWD]["reason"] == ("declared capabilities: no log-normalizer output "
                                        "(SDPA's public API returns the output only)")
    declared = read_env(out)["capabilities"]["flash_attention"]
    assert declared["source"] == "built-in adapter sdpa:math.capabilities" and declared["declared"]["lse"] is False
    assert "--kernel flash_attention=sdpa:math" in lines[GQA_CAUSAL_FWD]["reproduce"]


def test_sdpa_is_causal_is_judged_top_left_as_it_declares(tmp_path):
    """`sdpa:math_is_causal` calls SDPA with torch's own is_causal whatever Sq and Sk: judged
    against a top-left reference, every causal case runs (none unsupported for its alignment);
    the same mask judged bottom-right (an undeclared double of it) fails."""
    code, lines, out = run(tmp_path, "flash_attention=sdpa:math_is_causal", GQA_CAUSAL_FWD, MQA_EMPTY_ROWS_BWD,
                           SQUARE_FWD)
    assert code == 0 and {line["verdict"] for line in lines.values()} == {"pass"}
    assert lines[GQA_CAUSAL_FWD]["conventions"] == {"causal_alignment": "top_left"}
    assert "conventions" not in lines[SQUARE_FWD]  # Sq == Sk: the two alignments agree
    assert read_env(out)["capabilities"]["flash_attention"]["declared"]["causal_alignment"] == "top_left"
    code, lines, _ = run(tmp_path / "undeclared", "flash_attention=tests.fake_kernels:causal_top_left",
                         GQA_CAUSAL_FWD)
    assert code == 1 and lines[GQA_CAUSAL_FWD]["verdict"] == "fail"


def test_a_backend_torch_refuses_is_unsupported_with_torchs_reason(tmp_path):
    code, lines, _ = run(tmp_path, "flash_attention=sdpa:efficient", GQA_CAUSAL_FWD)
    assert code == 0
    line = lines[GQA_CAUSAL_FWD]
    assert line["verdict"] == "unsupported" and line["reason"].startswith("torch refuses sdpa:efficient here")


def test_flash_lower_right_is_not_run_off_cuda(tmp_path):
    with pytest.raises(NotSupported, match="CUDA only"):
        sdpa.adapter("flash_attention", "flash")(torch.zeros(1, 1, 3, 16), torch.zeros(1, 1, 5, 16),
                                                 torch.zeros(1, 1, 5, 16), causal=True)


def test_the_bottom_right_mask():
    assert sdpa.bottom_right_mask(2, 3, "cpu").tolist() == [[True, True, False], [True, True, True]]
    assert sdpa.bottom_right_mask(3, 2, "cpu").tolist() == [[False, False], [True, False], [True, True]]


def test_every_backend_declares_no_lse_total_or_dropout():
    for variant in sdpa.BACKENDS:
        declared = sdpa.adapter("flash_attention", variant).capabilities()
        assert (declared["lse"], declared["total"], declared["dropout"]) == (False, False, False)
        assert "fp8e4m3" not in declared["dtypes"]


@pytest.mark.parametrize("fake, case_id, words", [
    ("one_extra_too_many", LSE_FWD, "expected (out, lse) or FlagAttention's (out, lse or None, total or None), "
                                    "got a 3-tuple (Tensor, Tensor, Tensor)"),
    ("wrong_shape", SQUARE_FWD, "output contract: out has shape (1, 2, 15, 16), expected (1, 2, 16, 16)"),
])
def test_wrong_returns_are_that_cases_error(tmp_path, fake, case_id, words):
    code, lines, _ = run(tmp_path, f"flash_attention=tests.fake_kernels:{fake}", case_id)
    assert code == 1
    assert lines[case_id]["verdict"] == "error" and words in lines[case_id]["reason"]


@pytest.mark.parametrize("argv, words", [
    (["--kernel", "flash_attention=no_such_module:attention"], "argument --kernel: cannot load "
                                                               "flash_attention=no_such_module:attention"),
    (["--kernel", "flash_attention=tests.fake_kernels:missing"], "has no attribute 'missing'"),
    (["--kernel", "flash_attention=tests.fake_kernels:not_a_function"], "is a int, not a callable"),
    (["--kernel", "flash_attention=sdpa:fast"], "unknown SDPA backend 'fast' (known: sdpa:flash, sdpa:cudnn"),
    (["--kernel", "piecewise_attention=sdpa:math"], "sdpa:math implements flash_attention and flash_attention_varlen only"),
    (["--dropout-mask", "tests.fake_kernels:missing"], "argument --dropout-mask: cannot load"),
    (["--dropout-mask", "piecewise_attention=tests.fake_kernels:exact"], "piecewise_attention has no dropout"),
])
def test_bad_implementations_are_one_usage_error(capsys, argv, words):
    assert main(["run", "--case", SQUARE_FWD, "--out", "/nonexistent/never", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("conformance: error: argument --") and words in err and err.count("\n") == 1


@pytest.mark.parametrize("text, words", [
    ('[flash_attention]\nhead_dim = [64]\n', "unknown capability 'head_dim'"),
    ('[flash]\ngqa = false\n', "unknown operator table [flash]"),
    ('[flash_attention]\ngqa = "no"\n', "gqa: expected true or false"),
])
def test_a_bad_capabilities_file_is_a_usage_error_naming_the_key(tmp_path, capsys, text, words):
    path = tmp_path / "caps.toml"
    path.write_text(text)
    argv = ["run", "--case", SQUARE_FWD, "--out", str(tmp_path / "never"), "--capabilities", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "argument --capabilities" in err and words in err and err.count("\n") == 1
    assert not (tmp_path / "never").exists()


def test_a_missing_capabilities_file_is_a_usage_error(capsys):
    assert main(["run", "--case", SQUARE_FWD, "--capabilities", "/nonexistent/caps.toml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_file_declaration_wins_over_the_attribute(tmp_path):
    path = tmp_path / "caps.toml"
    path.write_text('[flash_attention]\ncausal = false\nreason = "testing"\n')
    code, lines, out = run(tmp_path, "flash_attention=sdpa:math", GQA_CAUSAL_FWD, extra=["--capabilities", str(path)])
    assert code == 0 and lines[GQA_CAUSAL_FWD]["reason"] == "declared capabilities: no causal mask (testing)"
    assert read_env(out)["capabilities"]["flash_attention"]["source"] == f"{path} [flash_attention]"
    assert f"--capabilities {path}" in lines[GQA_CAUSAL_FWD]["reproduce"]
