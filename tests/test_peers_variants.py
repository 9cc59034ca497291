"""FlashAttention-2's variants (window, softcap, ALiBi, packed variable-length batches) through
the peers, on the CPU: what torch SDPA's and FlexAttention's adapters declare
(conformance/peers/sdpa.py, flex.py), their masks against the operators' rule
(conformance.cases.variants), cases judged end to end, a deliberately wrong mask or score_mod
failing, and the test doubles without variants declaring so (unsupported, never error)."""

import inspect
import itertools

import pytest
import torch

from conformance.backends import activate
from conformance.cases.variants import visible_keys
from conformance.cli import main
from conformance.peers import flex, masks, sdpa
from conformance.running.results import read_results

PROFILE = activate()  # must precede importing the FlagAttention double (it imports kernels)

from tests import convention_doubles, fake_kernels, flag_double, nonfinite_doubles  # noqa: E402

WINDOW_FWD = "flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,win8_0,seed0]"
CAUSAL_WINDOW_ALIBI_FWD = "flash_attention.fwd[fp16,d32,causal,B1,H4,Hkv2,Sq96,Sk64,win16_4,alibi,seed0]"
ALIBI_BH_BWD = "flash_attention.bwd[bf16,d32,noncausal,B2,H4,Hkv2,Sq100,Sk40,alibi_bh,seed0]"
ALIBI_BH_FWD = "flash_attention.fwd[fp16,d32,noncausal,B2,H4,Hkv1,Sq64,Sk80,alibi_bh,seed0]"
EVERYTHING_FWD = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv2,Sq96,Sk128,win32_0,softcap20,alibi,seed0]"
SOFTCAP_FWD = "flash_attention.fwd[bf16,d32,causal,B1,H2,Hkv2,Sq96,Sk96,logits:64,softcap30,seed0]"
VARLEN_FWD = "flash_attention_varlen.fwd[bf16,d32,noncausal,B8,H4,Hkv2,Sq64,Sk48,win16_0,alibi_bh,lens=mixed,seed0]"
VARLEN_BWD = "flash_attention_varlen.bwd[bf16,d32,causal,B8,H2,Hkv2,Sq64,Sk48,negative:1000,win16_0,lens=mixed,seed0]"
VARLEN_SOFTCAP_FWD = "flash_attention_varlen.fwd[fp32,d16,noncausal,B5,H2,Hkv2,Sq33,Sk33,softcap30,lens=equal,seed0]"
VARIANT_KEYS = ("window", "softcap", "alibi", "varlen")


@pytest.fixture
def fresh_dynamo():
    """Compiled entries of earlier tests would make these tests' compilations cache hits."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def run(tmp_path, kernels, *case_ids):
    """`python -m conformance run` in-process; (exit code, results lines by case)."""
    out = tmp_path / "run"
    argv = ["run", "--out", str(out)]
    for kernel in kernels:
        argv += ["--kernel", kernel]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    return code, {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}


# --------------------------------------------------------------------------- declarations

@pytest.mark.parametrize("variant", [*sdpa.BACKENDS, *(f"{backend}{sdpa.IS_CAUSAL}" for backend in sdpa.BACKENDS)])
def test_sdpa_declares_the_variants_its_backend_can_state(variant):
    declared = sdpa.adapter("flash_attention", variant).capabilities()
    assert declared["softcap"] is False and declared["reasons"]["softcap"] == sdpa.NO_SOFTCAP
    masked = not variant.startswith("flash")  # flash takes no attn_mask
    assert (declared["window"], declared["alibi"], declared["varlen"]) == (masked,) * 3
    if not masked:
        assert {declared["reasons"][key] for key in ("window", "alibi", "varlen")} == {sdpa.NO_MASK}
    assert sdpa.adapter("flash_attention_varlen", variant).capabilities() == declared


def test_flex_declares_every_variant_on_both_devices():
    for device in ("cpu", "cuda"):
        declared = flex.capabilities(device)
        assert all(declared[key] is True for key in VARIANT_KEYS)
        assert "score_mod" in declared["reasons"]["softcap"] and "document mask" in declared["reasons"]["varlen"]


def test_the_peers_implement_the_varlen_operator_and_refuse_others():
    assert flex.adapter("flash_attention_varlen", "").__name__ == "flex_attention_varlen"
    assert sdpa.adapter("flash_attention_varlen", "math").__name__ == "sdpa_math_varlen"
    with pytest.raises(ValueError, match="flash_attention and flash_attention_varlen only"):
        flex.adapter("piecewise_attention", "")
    with pytest.raises(ValueError, match="flash_attention and flash_attention_varlen only"):
        sdpa.adapter("piecewise_attention", "math")


def _doubles():
    """Every operator function of the test doubles without FlashAttention-2's variants."""
    for module in (fake_kernels, convention_doubles, nonfinite_doubles, flag_double):
        for name, function in vars(module).items():
            if name.startswith("_") or not inspect.isfunction(function):
                continue
            parameters = inspect.signature(function).parameters
            if list(parameters)[:3] == ["q", "k", "v"] and "window_size" not in parameters:
                yield f"{module.__name__}:{name}", function


@pytest.mark.parametrize("name, function", list(_doubles()), ids=lambda item: item if isinstance(item, str) else "")
def test_doubles_without_variants_declare_none(name, function):
    declared = function.capabilities
    assert all(declared[key] is False for key in VARIANT_KEYS), name
    assert all(declared["reasons"][key] for key in VARIANT_KEYS), name


def test_doubles_without_variants_leave_variant_cases_unsupported(tmp_path):
    """The FlagAttention double and a fake kernel: every variant case unsupported with the
    declared reason, none launched (an undeclared one would be an `error`: unexpected keyword)."""
    code, lines = run(tmp_path / "flag", ["flash_attention=tests.flag_double:flash_attention"], WINDOW_FWD,
                      ALIBI_BH_BWD, SOFTCAP_FWD)
    assert code == 0
    why = f"({flag_double.NO_VARIANTS})"
    assert lines[WINDOW_FWD]["reason"] == f"declared capabilities: no sliding window (window_size) {why}"
    assert lines[ALIBI_BH_BWD]["reason"] == f"declared capabilities: no ALiBi (alibi_slopes) {why}"
    assert lines[SOFTCAP_FWD]["reason"] == f"declared capabilities: no softcap {why}"
    code, lines = run(tmp_path / "fake", ["flash_attention=tests.fake_kernels:exact",
                                          "flash_attention_varlen=tests.fake_kernels:exact"],
                      EVERYTHING_FWD, VARLEN_FWD)
    assert code == 0 and {line["verdict"] for line in lines.values()} == {"unsupported"}
    assert lines[VARLEN_FWD]["reason"].startswith("declared capabilities: no sliding window")
    assert fake_kernels.NO_VARIANTS_REASON in lines[EVERYTHING_FWD]["reason"]


# --------------------------------------------------------------------------- the masks against the rule

SHAPES = [(5, 9), (9, 5), (7, 7), (1, 6), (6, 1)]
WINDOWS = [None, (2, 0), (0, 0), (3, 1), (-1, 2), (4, -1)]


@pytest.mark.parametrize("causal, window", list(itertools.product((False, True), WINDOWS)))
def test_flex_mask_mod_and_sdpa_mask_see_the_operators_keys(causal, window):
    for seq_q, seq_k in SHAPES:
        expected = torch.zeros(seq_q, seq_k, dtype=torch.bool)
        for row in range(seq_q):
            first, last = visible_keys(row, seq_q, seq_k, causal, window)
            expected[row, max(first, 0): last + 1] = first <= last
        mask_mod = flex.dense_mask_mod(seq_q, seq_k, causal, window)
        rows, keys = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
        flex_mask = torch.ones_like(expected) if mask_mod is None else mask_mod(0, 0, rows, keys)
        assert torch.equal(flex_mask.expand_as(expected), expected), (seq_q, seq_k)
        lengths = torch.tensor([seq_q]), torch.tensor([seq_k])
        additive = sdpa.additive_mask(*lengths, seq_q, seq_k, causal, window, None)
        assert torch.equal(torch.isfinite(additive[0, 0]), expected), (seq_q, seq_k)


def test_the_alibi_bias_and_its_row_shift():
    """-slope * |i + Sk - Sq - j| on visible keys; each row moved by a constant so that its
    largest value is 0 (softmax-invariant), per (batch, head) slope."""
    slopes = torch.tensor([[0.5, 0.25], [1.0, 2.0]])
    mask = sdpa.additive_mask(torch.tensor([3]), torch.tensor([5]), 3, 5, False, None, slopes)
    assert mask.shape == (2, 2, 3, 5)
    rows, keys = torch.arange(3)[:, None], torch.arange(5)[None, :]
    bias = masks.alibi_bias(slopes[:, :, None, None], rows + 2, keys)
    assert torch.allclose(mask, bias - bias.amax(dim=-1, keepdim=True))
    assert torch.equal(mask.amax(dim=-1), torch.zeros(2, 2, 3))


def test_the_padded_mask_of_a_packed_batch():
    """Per sequence its own bottom-right offset; padding rows see key 0 only; padding keys none."""
    mask = sdpa.additive_mask(torch.tensor([2, 0, 3]), torch.tensor([3, 2, 0]), 3, 3, True, None, None, padded=True)
    seen = torch.isfinite(mask[:, 0])
    assert seen[0].tolist() == [[True, True, False], [True, True, True], [True, False, False]]
    assert seen[1].tolist() == [[True, False, False]] * 3  # no queries: every row is padding
    assert not seen[2].any()  # no keys: its rows see nothing (out 0)


def test_the_packed_block_mask_lists_every_tile_flex_would():
    """packed_block_mask (from key ranges) against create_block_mask (every pair evaluated): a
    superset of its tiles, all partial, so the mask_mod decides."""
    flex.load_flex()
    layout = flex.PackedLayout.of(torch.tensor([0, 3, 3, 10, 200, 201], dtype=torch.int32),
                                  torch.tensor([0, 5, 6, 6, 300, 301], dtype=torch.int32))
    for causal, window in ((False, None), (True, None), (True, (16, -1)), (False, (4, 2))):
        mask_mod = layout.mask_mod(causal, window)
        built = flex.packed_block_mask(layout, causal, window, mask_mod, block=16)
        evaluated = flex._flex.create_block_mask(mask_mod, 1, None, 201, 301, device="cpu", BLOCK_SIZE=16)
        assert built.shape == evaluated.shape == (1, 1, 201, 301)
        listed, needed = built.to_dense()[0, 0].bool(), evaluated.to_dense()[0, 0].bool()
        assert not (needed & ~listed).any(), (causal, window)
        assert built.full_kv_num_blocks is None


def test_flex_varlen_returns_the_operators_layouts(monkeypatch):
    """out (total_q, H, D) and lse (H, total_q) from flex's (1, H, total, D) and (1, H, total)."""
    flex.load_flex()
    seen = {}

    def fake_run(q, k, v, block_mask, score_mod, sm_scale, want_lse):
        seen.update(q=q.shape, k=k.shape, score_mod=score_mod)
        out = torch.arange(q.numel(), dtype=torch.float32).reshape(q.shape)
        return (out, out[..., 0]) if want_lse else out

    monkeypatch.setattr(flex, "_run", fake_run)
    q, k = torch.zeros(7, 4, 16), torch.zeros(9, 2, 16)
    cu_q, cu_k = torch.tensor([0, 3, 7], dtype=torch.int32), torch.tensor([0, 4, 9], dtype=torch.int32)
    out, lse = flex._call_varlen(q, k, k, cu_q, cu_k, True, None, True, None, 0.0, None)
    assert (seen["q"], seen["k"], seen["score_mod"]) == ((1, 4, 7, 16), (1, 2, 9, 16), None)
    assert out.shape == (7, 4, 16) and lse.shape == (4, 7)
    expected = torch.arange(q.numel(), dtype=torch.float32).reshape(1, 4, 7, 16)
    assert torch.equal(out, expected[0].transpose(0, 1)) and torch.equal(lse, expected[0, ..., 0])


# --------------------------------------------------------------------------- judged end to end

def test_sdpa_math_passes_windows_alibi_and_packed_batches(tmp_path):
    code, lines = run(tmp_path, ["flash_attention=sdpa:math", "flash_attention_varlen=sdpa:math"], WINDOW_FWD,
                      CAUSAL_WINDOW_ALIBI_FWD, ALIBI_BH_BWD, VARLEN_FWD, VARLEN_BWD, SOFTCAP_FWD)
    assert code == 0
    for case_id in (WINDOW_FWD, CAUSAL_WINDOW_ALIBI_FWD, ALIBI_BH_BWD, VARLEN_FWD, VARLEN_BWD):
        assert lines[case_id]["verdict"] == "pass", (case_id, lines[case_id].get("reason"))
    assert lines[SOFTCAP_FWD]["reason"] == f"declared capabilities: no softcap ({sdpa.NO_SOFTCAP})"
    assert "--kernel flash_attention_varlen=sdpa:math" in lines[VARLEN_FWD]["reproduce"]


def test_sdpa_refusals_are_unsupported_with_the_reason(tmp_path):
    code, lines = run(tmp_path / "flash", ["flash_attention=sdpa:flash", "flash_attention_varlen=sdpa:flash"],
                      WINDOW_FWD, VARLEN_FWD)
    assert code == 0
    assert lines[WINDOW_FWD]["reason"] == f"declared capabilities: no sliding window (window_size) ({sdpa.NO_MASK})"
    assert lines[VARLEN_FWD]["reason"] == f"declared capabilities: no sliding window (window_size) ({sdpa.NO_MASK})"
    # torch's own is_causal takes no mask beside it: causal cases that need one are refused, others run
    code, lines = run(tmp_path / "is_causal", ["flash_attention=sdpa:math_is_causal"], CAUSAL_WINDOW_ALIBI_FWD,
                      ALIBI_BH_FWD)
    assert code == 0
    assert (lines[CAUSAL_WINDOW_ALIBI_FWD]["verdict"], lines[CAUSAL_WINDOW_ALIBI_FWD]["reason"]) == (
        "unsupported", sdpa.IS_CAUSAL_WITH_MASK)
    assert lines[ALIBI_BH_FWD]["verdict"] == "pass"


def test_a_wrong_window_in_the_sdpa_mask_fails(tmp_path, monkeypatch):
    """The window's left edge one key too far right (j > i + off - left): the case fails."""
    bounds = masks.window_bounds
    monkeypatch.setattr(masks, "window_bounds", lambda causal, window: (lambda lr: (lr[0] - (lr[0] > 0), lr[1]))(
        bounds(causal, window)))
    code, lines = run(tmp_path, ["flash_attention=sdpa:math"], WINDOW_FWD)
    assert code == 1 and lines[WINDOW_FWD]["verdict"] == "fail"


def test_flex_passes_every_variant_compiled(tmp_path, fresh_dynamo):
    """On the CPU (forward only, no lse): the window with the causal mask, softcap and ALiBi
    together, per-batch slopes, and a packed batch with a window and per-sequence slopes."""
    code, lines = run(tmp_path, ["flash_attention=flex", "flash_attention_varlen=flex"], EVERYTHING_FWD,
                      ALIBI_BH_FWD, VARLEN_FWD, VARLEN_BWD)
    assert code == 0
    for case_id in (EVERYTHING_FWD, ALIBI_BH_FWD, VARLEN_FWD):
        assert lines[case_id]["verdict"] == "pass", (case_id, lines[case_id].get("reason"))
        assert lines[case_id]["compilations"] >= 1
    assert lines[VARLEN_BWD]["reason"].startswith("declared capabilities: direction bwd not in [fwd] (torch:")


def test_a_flex_score_mod_that_ignores_the_batch_fails(tmp_path, fresh_dynamo, monkeypatch):
    """ALiBi slopes (B, H) read as slope[0, h] for every batch entry: the case fails."""
    dense_score_mod = flex.dense_score_mod
    monkeypatch.setattr(flex, "dense_score_mod", lambda seq_q, seq_k, softcap, slopes: dense_score_mod(
        seq_q, seq_k, softcap, slopes[:1].expand_as(slopes).contiguous()))
    code, lines = run(tmp_path, ["flash_attention=flex"], ALIBI_BH_FWD)
    assert code == 1 and lines[ALIBI_BH_FWD]["verdict"] == "fail"
