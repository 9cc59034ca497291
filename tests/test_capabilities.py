"""Declared capabilities (conformance/running/capabilities.py) and return conventions
(conformance/judging/returns.py): parsing, validation, and what a declaration excludes."""

import pytest
import torch

from conformance.cases.catalog import Case
from conformance.judging import returns
from conformance.running import capabilities
from conformance.running.capabilities import Capabilities, from_mapping, load_file

CASE = Case.from_id("flash_attention.fwd[fp16,d96,causal,B1,H4,Hkv2,Sq77,Sk133,lse,seed0]")


def _excluded(case_id: str, **declared) -> str | None:
    return from_mapping(declared, "test").unsupported_reason(Case.from_id(case_id))


def test_undeclared_admits_every_case():
    assert Capabilities().unsupported_reason(CASE) is None
    assert Capabilities().declared() == {}


@pytest.mark.parametrize("declared, words", [
    ({"head_dims": [16, 32, 64, 128]}, "head dim 96 not in [16, 32, 64, 128]"),
    ({"dtypes": ["bf16"]}, "dtype fp16 not in [bf16]"),
    ({"gqa": False}, "no grouped-query attention"),
    ({"lse": False}, "no log-normalizer output"),
    ({"unequal_lengths": False}, "Sq != Sk"),
    ({"max_seq_k": 128}, "Sk 133 > 128"),
    ({"causal": False}, "no causal mask"),
    ({"directions": ["bwd"]}, "direction fwd not in [bwd]"),
])
def test_a_declaration_excludes_what_it_does_not_list(declared, words):
    reason = from_mapping(declared, "test").unsupported_reason(CASE)
    assert reason.startswith("declared capabilities: ") and words in reason


def test_the_declared_reason_is_given_key_first_then_general():
    declared = {"head_dims": [64], "lse": False, "reason": "general", "reasons": {"lse": "no lse kernel"}}
    assert _excluded(CASE.id.replace("d96", "d64"), **declared).endswith("(no lse kernel)")
    assert _excluded(CASE.id, **declared).endswith("(general)")


def test_mqa_follows_gqa_unless_given():
    mqa = "flash_attention.fwd[fp16,d64,noncausal,B1,H4,Hkv1,Sq64,Sk64,seed0]"
    assert "multi-query" in _excluded(mqa, gqa=False)
    assert _excluded(mqa, gqa=False, mqa=True) is None


def test_top_left_alignment_runs_every_flash_case_judged_top_left():
    """tests/test_conventions.py: the causal Sq != Sk ones against a top-left reference."""
    for case_id in ("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq64,Sk64,seed0]",
                    "flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq64,Sk99,seed0]",
                    "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq64,Sk99,seed0]"):
        assert _excluded(case_id, causal_alignment="top_left") is None


def test_empty_rows_are_causal_rows_past_the_keys():
    assert "no key" in _excluded("flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq99,Sk64,seed0]",
                                 empty_rows=False)
    assert _excluded("flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq64,Sk99,seed0]", empty_rows=False) is None


@pytest.mark.parametrize("declared, words", [
    ({"head_dim": [64]}, "unknown capability 'head_dim'"),
    ({"dtypes": ["float16"]}, "dtypes: unknown value 'float16'"),
    ({"dtypes": "fp16"}, "dtypes: expected a non-empty list"),
    ({"head_dims": [0]}, "head_dims: expected a list of positive ints"),
    ({"gqa": "no"}, "gqa: expected true or false"),
    ({"max_seq_q": -1}, "max_seq_q: expected a positive int"),
    ({"causal_alignment": "diagonal"}, "causal_alignment: expected one of bottom_right, top_left"),
    ({"reasons": {"head_dim": "x"}}, "reasons.head_dim: not a capability"),
])
def test_malformed_declarations_name_the_key(declared, words):
    with pytest.raises(ValueError, match="^where: ") as raised:
        from_mapping(declared, "where")
    assert words in str(raised.value)


def test_a_file_declares_per_operator(tmp_path):
    path = tmp_path / "caps.toml"
    path.write_text('[piecewise_attention]\ngqa = false\nreason = "no GQA"\n')
    tables = load_file(str(path))
    assert list(tables) == ["piecewise_attention"] and tables["piecewise_attention"].gqa is False
    path.write_text('[flash_attn]\ngqa = false\n')
    with pytest.raises(ValueError, match=r"unknown operator table \[flash_attn\]"):
        load_file(str(path))
    path.write_text('[flash_attention\n')
    with pytest.raises(ValueError, match="not valid TOML"):
        load_file(str(path))


def test_a_function_attribute_may_be_a_dict_or_a_callable():
    def kernel():
        pass
    assert capabilities.of_function(kernel, "k") is None
    kernel.capabilities = {"lse": False}
    assert capabilities.of_function(kernel, "k").lse is False
    kernel.capabilities = lambda: {"total": False}
    assert capabilities.of_function(kernel, "k").total is False


# --------------------------------------------------------------------------- return conventions

OUT, LSE, TOTAL = (torch.zeros(1) for _ in range(3))


@pytest.mark.parametrize("result, wanted, convention", [
    ((OUT, LSE), ["out", "lse"], returns.COMPACT),
    ((OUT, TOTAL), ["out", "total"], returns.COMPACT),
    ((OUT, LSE, None), ["out", "lse"], returns.PLACEHOLDERS),
    ((OUT, None, TOTAL), ["out", "total"], returns.PLACEHOLDERS),
    ((OUT, LSE, TOTAL), ["out", "lse", "total"], returns.FULL),
])
def test_both_return_conventions_are_accepted(result, wanted, convention):
    returned = returns.parse(result, wanted)
    assert returned.convention == convention and list(returned.tensors) == wanted
    assert all(returned.tensors[name] is item for name, item in zip(("out", "lse", "total"), result) if item is not None
               and name in wanted)


def test_seed_and_offset_come_last_in_either_convention():
    five = returns.parse((OUT, None, None, 7, 4), ["out"], seed_offset=True)
    assert (five.convention, five.seed_offset, list(five.tensors)) == (returns.PLACEHOLDERS, (7, 4), ["out"])
    compact = returns.parse((OUT, LSE, 7, 4), ["out", "lse"], seed_offset=True)
    assert (compact.convention, compact.seed_offset) == (returns.COMPACT, (7, 4))


@pytest.mark.parametrize("result, wanted, words", [
    ((OUT, LSE), ["out"], "expected the output tensor alone, got a 2-tuple"),
    (OUT, ["out", "lse"], "expected (out, lse) or FlagAttention's (out, lse or None, total or None), got Tensor"),
    ((OUT, LSE, TOTAL, LSE), ["out", "lse"], "got a 4-tuple (Tensor, Tensor, Tensor, Tensor)"),
    ((OUT, None, TOTAL), ["out", "lse"], "lse is None though requested"),
    ((OUT, LSE, TOTAL), ["out", "total"], "lse is given though not requested"),
])
def test_wrong_returns_say_what_was_expected_and_what_came(result, wanted, words):
    with pytest.raises(TypeError) as raised:
        returns.parse(result, wanted)
    assert words in str(raised.value)


@pytest.mark.parametrize("case_id, key, words", [
    ("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq64,Sk64,win128_0,seed0]", "window", "no sliding window"),
    ("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq64,Sk64,softcap30,seed0]", "softcap", "no softcap"),
    ("flash_attention.fwd[fp16,d64,causal,B2,H2,Hkv2,Sq64,Sk64,alibi_bh,seed0]", "alibi", "no ALiBi"),
    ("flash_attention_varlen.fwd[fp16,d64,causal,B4,H2,Hkv2,Sq64,Sk64,lens=equal,seed0]", "varlen",
     "no variable-length"),
])
def test_flash_attention_2_variants_are_capabilities(case_id, key, words):
    """Issue 33: window, softcap, alibi and varlen, declared false, make their cases unsupported."""
    assert words in _excluded(case_id, **{key: False})
    assert _excluded(case_id, **{key: True}) is None
    assert _excluded(CASE.id, **{key: False}) is None
