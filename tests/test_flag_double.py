"""Judging a FlagAttention-shaped implementation end to end: tests/flag_double.py (the
bundled kernels behind FlagAttention's edges) through `python -m conformance run` with
`--kernel`, `--dropout-mask` and `--capabilities`, on Triton's CPU interpreter; and the
double's own edges, so that what the harness is shown really is FlagAttention's shape."""

import subprocess
import sys

import pytest
import torch

from conformance.backends import activate
from conformance.running.results import read_env, read_results
from tests.test_cli import REPO

PROFILE = activate()  # must precede importing the double (it imports kernels)

from tests import flag_double  # noqa: E402

KERNEL_ARGS = ["--kernel", "flash_attention=tests.flag_double:flash_attention",
               "--kernel", "piecewise_attention=tests.flag_double:piecewise_attention",
               "--dropout-mask", "tests.flag_double:recompute_mask"]
CAPABILITIES = "tests/flag_double.toml"

# Smoke-tier cases (`python -m conformance list --tier smoke`), plus one piecewise GQA case
# (the smoke tier has piecewise MQA only).
D64 = "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq130,Sk61,seed0]"  # causal, Sq > Sk
D64_BWD = "flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]"  # causal, Sq < Sk
D96_FWD = "flash_attention.fwd[fp16,d96,causal,B1,H2,Hkv2,Sq80,Sk80,seed0]"
D96_BWD = "flash_attention.bwd[fp16,d96,causal,B1,H2,Hkv2,Sq80,Sk80,seed0]"
D256 = "flash_attention.fwd[bf16,d256,noncausal,B1,H1,Hkv1,Sq64,Sk64,seed0]"
LSE = "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq130,Sk61,lse,seed0]"
TOTAL = "flash_attention.fwd[fp16,d32,noncausal,B2,H2,Hkv1,Sq40,Sk72,total,seed0]"
DROPOUT_FWD = "flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq96,Sk128,dropout0.2,seed0]"  # MQA
DROPOUT_BWD = "flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv1,Sq96,Sk128,dropout0.2,seed0]"
GQA = "flash_attention.fwd[fp16,d32,causal,B1,H4,Hkv2,Sq64,Sk64,bshd,seed0]"
PIECEWISE_MQA = "piecewise_attention.fwd[fp16,d32,noncausal,B1,H2,Hkv1,Sq77,Sk100,dist24,seed0]"
PIECEWISE_GQA = "piecewise_attention.fwd[fp16,d32,causal,B1,H4,Hkv2,Sq77,Sk100,dist24,seed0]"
PIECEWISE_FWD = "piecewise_attention.fwd[fp32,d16,causal,B1,H2,Hkv2,Sq77,Sk100,dist24,seed0]"
PIECEWISE_BWD = "piecewise_attention.bwd[fp32,d16,causal,B1,H2,Hkv2,Sq77,Sk100,dist24,seed0]"
CASES = (D64, D64_BWD, D96_FWD, D96_BWD, D256, LSE, TOTAL, DROPOUT_FWD, DROPOUT_BWD, GQA,
         PIECEWISE_MQA, PIECEWISE_GQA, PIECEWISE_FWD, PIECEWISE_BWD)

FLASH_HEAD_DIMS = "FlagAttention's flash kernel asserts head_dim in (16, 32, 64, 128)"
UNSUPPORTED = {
    D96_FWD: f"declared capabilities: head dim 96 not in [16, 32, 64, 128] ({FLASH_HEAD_DIMS})",
    D96_BWD: f"declared capabilities: head dim 96 not in [16, 32, 64, 128] ({FLASH_HEAD_DIMS})",
    D256: f"declared capabilities: head dim 256 not in [16, 32, 64, 128] ({FLASH_HEAD_DIMS})",
    PIECEWISE_MQA: ("declared capabilities: no multi-query attention (kv_heads == 1) (FlagAttention's piecewise "
                    "kernel has no multi-query attention (the double asserts kv_heads == heads))"),
    PIECEWISE_GQA: ("declared capabilities: no grouped-query attention (kv_heads < heads) (FlagAttention's "
                    "piecewise kernel takes as many kv heads as query heads (the double asserts it))"),
}


def run_conformance(out, *case_ids, extra=()):
    """`python -m conformance run` from the repository root; (exit code, lines by case, output)."""
    command = [sys.executable, "-m", "conformance", "run", "--out", str(out), *KERNEL_ARGS, *extra]
    for case_id in case_ids:
        command += ["--case", case_id]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    output = completed.stdout[-4000:] + completed.stderr[-4000:]
    assert completed.returncode in (0, 1), output  # not a usage error or a crash
    lines = {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}
    return completed.returncode, lines, output


def test_the_command_line_judges_the_double(tmp_path):
    out = tmp_path / "run"
    code, lines, output = run_conformance(out, *CASES, extra=["--capabilities", CAPABILITIES, "-n", "2"])
    assert sorted(lines) == sorted(CASES), output

    # Declared capabilities: nothing launched, the declared reason recorded.
    for case_id, reason in UNSUPPORTED.items():
        assert (lines[case_id]["verdict"], lines[case_id]["reason"]) == ("unsupported", reason)

    # Dropout through the seed/offset protocol: judged (tensors compared), passed, keep rate sane.
    for case_id in (DROPOUT_FWD, DROPOUT_BWD):
        line = lines[case_id]
        assert (line["verdict"], line["rule_verdict"]) == ("pass", "pass"), line.get("reason")
        assert line["tensors"] and line["return_convention"] == "placeholders"
        assert abs(line["dropout_keep_rate"] - 0.8) < 0.02
    assert {t["name"] for t in lines[DROPOUT_BWD]["tensors"]} == {"dq", "dk", "dv"}

    # Plain cases (head dim 64, causal with Sq != Sk both ways, GQA, piecewise without GQA) pass.
    for case_id in (D64, D64_BWD, GQA, PIECEWISE_FWD, PIECEWISE_BWD):
        assert lines[case_id]["verdict"] == "pass", (case_id, lines[case_id].get("reason"))

    # Both declaration routes reach env.json with their sources, and the summary names them.
    env = read_env(out)
    assert env["implementation"] == {"flash_attention": "tests.flag_double:flash_attention",
                                     "piecewise_attention": "tests.flag_double:piecewise_attention",
                                     "flash_attention_varlen": "kernels:flash_attention_varlen",
                                     "kv_cache_attention": "kernels:kv_cache_attention"}
    flash, piecewise = env["capabilities"]["flash_attention"], env["capabilities"]["piecewise_attention"]
    assert flash["source"] == "attribute tests.flag_double:flash_attention.capabilities"
    assert flash["declared"]["head_dims"] == [16, 32, 64, 128]
    assert flash["declared"]["dtypes"] == ["fp16", "bf16", "fp32"]
    assert piecewise["source"] == f"{CAPABILITIES} [piecewise_attention]"
    assert (piecewise["declared"]["gqa"], piecewise["declared"]["mqa"]) == (False, False)
    summary = (out / "summary.md").read_text()
    implementations = summary.split("## Implementations", 1)[1].split("\n## ", 1)[0]
    assert "`tests.flag_double:flash_attention`" in implementations
    assert "`tests.flag_double:piecewise_attention`" in implementations
    assert f"{CAPABILITIES} [piecewise_attention]" in implementations
    assert "placeholders" in implementations
    assert "--dropout-mask flash_attention=tests.flag_double:recompute_mask" in lines[DROPOUT_BWD]["reproduce"]

    # lse and total: FlagAttention's five values, placeholders for what was not asked for.
    verdicts = {case_id: line["verdict"] for case_id, line in lines.items()}
    assert set(verdicts.values()) <= {"pass", "unsupported"}, verdicts
    for case_id in (LSE, TOTAL):
        assert (lines[case_id]["verdict"], lines[case_id]["return_convention"]) == ("pass", "placeholders")
    assert code == 0, output


def test_an_isolated_run_replays_the_doubles_dropout(tmp_path):
    """The worker process imports the double and the mask function itself."""
    code, lines, output = run_conformance(tmp_path / "run", DROPOUT_BWD, D96_FWD, extra=["--isolate", "-n", "0"])
    assert code == 0, output
    assert lines[DROPOUT_BWD]["verdict"] == "pass", lines[DROPOUT_BWD].get("reason")
    assert lines[DROPOUT_BWD]["return_convention"] == "placeholders"
    assert lines[D96_FWD]["verdict"] == "unsupported"  # the attribute declares it; no file given


# --------------------------------------------------------------------------- the double's edges

def qkv(head_dim=16, heads=2, kv_heads=2, seq_q=24, seq_k=40, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    shapes = [(1, heads, seq_q, head_dim), (1, kv_heads, seq_k, head_dim), (1, kv_heads, seq_k, head_dim)]
    return [torch.randn(shape, generator=gen, dtype=dtype).to(PROFILE.device) for shape in shapes]


def test_head_dims_and_piecewise_gqa_are_plain_assertions():
    with pytest.raises(AssertionError):
        flag_double.flash_attention(*qkv(head_dim=96))
    q, k, v = qkv(heads=4, kv_heads=2)
    with pytest.raises(AssertionError):
        flag_double.piecewise_attention(q, k, q, k, v, 8)
    q, k, v = qkv(head_dim=96)
    with pytest.raises(AssertionError):
        flag_double.piecewise_attention(q, k, q, k, v, 8)


def test_returns_out_alone_or_five_values():
    torch.manual_seed(0)  # the dropout calls draw (seed, offset) from torch's generator
    q, k, v = qkv()
    assert isinstance(flag_double.flash_attention(q, k, v), torch.Tensor)
    assert isinstance(flag_double.flash_attention(q, k, v, dropout_p=0.5), torch.Tensor)
    out, lse, total, seed, offset = flag_double.flash_attention(q, k, v, return_log_normalizer=True)
    assert lse.shape == (1, 2, 24) and (total, seed, offset) == (None, None, None)
    out, lse, total, seed, offset = flag_double.flash_attention(q, k, v, return_total_attention=True)
    assert lse is None and total.shape == (1, 2, 40) and (seed, offset) == (None, None)
    # seed and offset only when dropout is active and they are asked for
    assert flag_double.flash_attention(q, k, v, return_seed_offset=True)[1:] == (None, None, None, None)
    *_, seed, offset = flag_double.flash_attention(q, k, v, dropout_p=0.5, return_seed_offset=True)
    assert isinstance(seed, int) and isinstance(offset, int) and offset % 4 == 0


def test_recompute_mask_is_the_mask_the_call_used():
    q, k, v = qkv()
    p = 0.3
    torch.manual_seed(1234)
    out, _, _, seed, offset = flag_double.flash_attention(q, k, v, dropout_p=p, return_seed_offset=True)
    torch.manual_seed(1234)  # the harness's replay: same torch seed, same (seed, offset), same bits
    again, _, _, seed_again, offset_again = flag_double.flash_attention(q, k, v, dropout_p=p, return_seed_offset=True)
    assert (seed_again, offset_again) == (seed, offset) and torch.equal(again, out)

    mask = flag_double.recompute_mask(1, 2, 24, 40, p, seed, offset, PROFILE.device)
    assert mask.dtype == torch.bool and mask.shape == (1, 2, 24, 40)
    assert abs(mask.float().mean().item() - (1 - p)) < 0.05

    def attention(keep):
        weights = torch.softmax(q.double() @ k.double().transpose(-1, -2) / 4.0, dim=-1)
        return (weights * keep / (1 - p)) @ v.double()

    assert (out.double() - attention(mask)).abs().max() < 1e-5
    assert (out.double() - attention(~mask)).abs().max() > 0.1  # the mask matters
    # With nothing dropped the same formula is plain attention: the p = 0 call.
    plain = flag_double.flash_attention(q, k, v)
    assert (plain.double() - attention(torch.ones_like(mask)) * (1 - p)).abs().max() < 1e-5
    # The offset is part of the mask's identity, like FlagAttention's Philox offset.
    assert not torch.equal(mask, flag_double.recompute_mask(1, 2, 24, 40, p, seed, offset + 4, PROFILE.device))
