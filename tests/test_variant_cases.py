"""FlashAttention-2's variants as cases: id tokens, validation, the lengths of varlen cases,
which rows see no key, declared capabilities and conventions, and the varlen packing."""

import dataclasses

import pytest
import torch

from conformance.bundled.reference import REFERENCE, attention_forward
from conformance.cases.catalog import Case
from conformance.cases.inputs import make_inputs
from conformance.cases.variants import (alibi_slope_values, has_empty_rows, has_unequal_lengths,
                                        sequence_lengths)
from conformance.judging import varlen
from conformance.judging.comparison_paths import with_empty_row_lse
from conformance.judging.conventions import Conventions
from conformance.judging.operators import OPERATORS
from conformance.judging.variant_options import alibi_reach, kernel_options, reference_options
from conformance.running.capabilities import from_mapping

WINDOW = "flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk133,win24_8,seed0]"
ALL_THREE = "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv2,Sq96,Sk128,lse,win32_0,softcap20,alibi,seed0]"
VARLEN = "flash_attention_varlen.fwd[fp16,d32,causal,B8,H2,Hkv1,Sq48,Sk64,lse,lens=mixed,seed0]"


# --- ids and validation -----------------------------------------------------------------

@pytest.mark.parametrize("case_id", [
    WINDOW, ALL_THREE, VARLEN,
    "flash_attention.fwd[fp16,d64,noncausal,B2,H4,Hkv1,Sq64,Sk80,lse,win-1_64,alibi_bh,seed3]",
    "flash_attention.bwd[bf16,d64,causal,B1,H2,Hkv2,Sq9,Sk9,softcap2.5,seed0]",
    "flash_attention_varlen.bwd[bf16,d64,causal,B1000,H4,Hkv1,Sq128,Sk128,dropout0.1,win128_0,lens=paired,seed0]",
])
def test_variant_ids_round_trip(case_id):
    assert Case.from_id(case_id).id == case_id


def test_tokens_are_the_documented_ones():
    case = Case.from_id(ALL_THREE)
    assert (case.window, case.softcap, case.alibi, case.lens) == ((32, 0), 20.0, "h", None)
    assert Case.from_id(VARLEN).lens == "mixed" and Case.from_id(VARLEN).batch == 8
    # a results line's JSON list reads back as the tuple
    assert Case(**{**case.fields(), "window": [32, 0]}) == case


@pytest.mark.parametrize("text, words", [
    ("piecewise_attention.fwd[fp16,d32,causal,B1,H2,Hkv2,Sq9,Sk9,dist4,win4_0,seed0]", "not piecewise_attention's"),
    ("flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv2,Sq9,Sk9,win-1_-1,seed0]", "is no window"),
    ("flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv2,Sq9,Sk9,win-2_0,seed0]", "ints >= -1"),
    ("flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv2,Sq9,Sk9,lens=mixed,seed0]", "required by flash_attention_varlen"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk9,seed0]", "required by flash_attention_varlen"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk8,lens=paired,seed0]", "needs Sq == Sk"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk9,total,lens=mixed,seed0]", "no total"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk9,bshd,lens=mixed,seed0]", "no layout"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk9,nan,lens=mixed,seed0]", "NaN/Inf"),
    ("flash_attention_varlen.fwd[fp8e4m3,d32,causal,B2,H2,Hkv2,Sq9,Sk9,lens=mixed,seed0]", "fp8"),
    ("flash_attention_varlen.fwd[fp16,d32,causal,B2,H2,Hkv2,Sq9,Sk9,lens=odd,seed0]", "unknown feature token"),
    ("flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv2,Sq9,Sk9,softcap30.0,seed0]", "not in canonical form"),
])
def test_invalid_variant_cases_are_errors(text, words):
    with pytest.raises(ValueError, match="malformed case id") as raised:
        Case.from_id(text)
    assert words in str(raised.value)


def test_a_window_grid_axis_takes_tuples():
    from conformance.cases.catalog import expand_grid

    cases = expand_grid(dict(direction=["fwd"], dtype=["fp16"], head_dim=[16], causal=[True],
                             window=[(4, 0), None], shape=[(1, 1, 1, 8, 8)]))
    assert [case.window for case in cases] == [(4, 0), None]


# --- lengths, empty rows, slopes ------------------------------------------------------

def _varlen(batch, lens="mixed", sq=128, sk=100, **fields):
    return Case("flash_attention_varlen", "fwd", "fp16", 32, True, batch, 2, 1, sq, sk, lens=lens, **fields)


def test_mixed_lengths_plant_the_edges_and_reach_the_max():
    len_q, len_k = sequence_lengths(_varlen(1000))
    pairs = set(zip(len_q, len_k))
    assert (128, 100) in pairs and max(len_q) == 128 and max(len_k) == 100
    assert any(q > 0 and k == 0 for q, k in pairs), "a sequence whose rows see no key"
    assert 0 in len_q and 1 in len_q and 1 in len_k
    assert len(set(len_q)) > 50, "lengths are spread, not a few values"


def test_lengths_are_fixed_by_the_case_and_change_with_its_seed():
    case = _varlen(40)
    assert sequence_lengths(case) == sequence_lengths(Case.from_id(case.id))
    assert sequence_lengths(case) != sequence_lengths(dataclasses.replace(case, seed=1))
    assert sequence_lengths(_varlen(1)) == ((128,), (100,))
    assert sequence_lengths(_varlen(3, "equal")) == ((128,) * 3, (100,) * 3)
    paired = sequence_lengths(_varlen(9, "paired", sq=64, sk=64))
    assert paired[0] == paired[1] and {0, 1, 64} <= set(paired[0])


def test_lengths_are_pinned():
    """Changing how lengths are drawn changes every varlen case's problem: do it on purpose only."""
    assert sequence_lengths(Case.from_id(VARLEN)) == ((44, 17, 30, 20, 1, 48, 14, 0), (40, 1, 43, 15, 8, 64, 0, 9))


@pytest.mark.parametrize("case_id", [
    WINDOW, ALL_THREE, VARLEN,
    "flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,lse,win8_0,seed0]",
    "flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq40,Sk100,lse,win0_0,seed0]",
    "flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,lse,win-1_3,seed0]",
    "flash_attention.fwd[bf16,d32,causal,B1,H2,Hkv2,Sq100,Sk40,lse,seed0]",
    "flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,lse,seed0]",
    "flash_attention_varlen.fwd[fp16,d32,noncausal,B3,H2,Hkv1,Sq48,Sk48,lse,lens=paired,seed0]",
    "flash_attention_varlen.fwd[fp16,d32,causal,B3,H2,Hkv1,Sq48,Sk64,lse,win3_0,lens=equal,seed0]",
])
def test_empty_rows_are_what_the_reference_finds(case_id):
    """The torch-free geometry (catalog, capabilities, conventions) agrees with the reference."""
    case = Case.from_id(case_id)
    tensors = make_inputs(case, "cpu").tensors
    options = reference_options(case, "cpu")
    _, lse = attention_forward(tensors["q"], tensors["k"], tensors["v"], causal=case.causal, precision=REFERENCE,
                               **options)
    real = ~varlen.padding_rows(case, "cpu") if case.lens else torch.ones_like(lse, dtype=torch.bool)
    assert has_empty_rows(case) == bool(((lse == float("-inf")) & real).any())


def test_unequal_lengths_are_per_sequence():
    assert has_unequal_lengths(_varlen(5, "mixed", 64, 64))
    assert not has_unequal_lengths(_varlen(5, "paired", 64, 64))
    assert has_unequal_lengths(_varlen(5, "equal", 64, 65))


def test_alibi_slopes_are_geometric_and_rotated_per_batch():
    case = Case.from_id("flash_attention.fwd[fp16,d64,noncausal,B2,H4,Hkv1,Sq64,Sk80,alibi_bh,seed0]")
    rows = alibi_slope_values(case)
    assert rows[0] == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8] and rows[1] == rows[0][1:] + rows[0][:1]
    slopes = kernel_options(case, "cpu")["alibi_slopes"]
    assert slopes.dtype == torch.float32 and slopes.shape == (2, 4)
    single = kernel_options(dataclasses.replace(case, alibi="h"), "cpu")["alibi_slopes"]
    assert single.shape == (4,)


def test_only_the_options_a_case_uses_are_passed():
    assert kernel_options(Case.from_id(WINDOW), "cpu") == {"window_size": (24, 8)}
    assert set(kernel_options(Case.from_id(ALL_THREE), "cpu")) == {"window_size", "softcap", "alibi_slopes"}
    assert set(reference_options(Case.from_id(VARLEN), "cpu")) == {"seq_lens"}


def test_alibi_reach_is_the_bias_at_the_nearest_seen_key():
    far = Case.from_id("flash_attention.fwd[fp16,d64,noncausal,B1,H4,Hkv4,Sq100,Sk40,alibi,seed0]")
    assert alibi_reach(far) == pytest.approx(2.0 ** -2 * 60)  # row 0 sits 60 before key 0
    assert alibi_reach(dataclasses.replace(far, causal=True)) == 0  # rows that see a key see their diagonal
    assert alibi_reach(dataclasses.replace(far, alibi=None)) == 0


# --- capabilities and conventions -----------------------------------------------------------

@pytest.mark.parametrize("key, case_id, words", [
    ("window", WINDOW, "no sliding window"),
    ("softcap", ALL_THREE, "no softcap"),
    ("alibi", ALL_THREE, "no ALiBi"),
    ("varlen", VARLEN, "no variable-length"),
])
def test_a_variant_declared_false_is_unsupported_with_its_reason(key, case_id, words):
    declared = from_mapping({key: False, "reasons": {key: "not in this kernel"}}, "test")
    reason = declared.unsupported_reason(Case.from_id(case_id))
    assert reason.startswith("declared capabilities: ") and words in reason and reason.endswith("(not in this kernel)")
    assert from_mapping({key: True}, "test").unsupported_reason(Case.from_id(case_id)) is None


def test_variant_keys_must_be_booleans():
    with pytest.raises(ValueError, match="window: expected true or false"):
        from_mapping({"window": "yes"}, "where")


def test_empty_rows_and_unequal_lengths_cover_windows_and_sequences():
    no_empty = from_mapping({"empty_rows": False}, "test")
    assert "no key" in no_empty.unsupported_reason(
        Case.from_id("flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,lse,win8_0,seed0]"))
    assert "no key" in no_empty.unsupported_reason(Case.from_id(VARLEN))  # a sequence without keys
    mixed_square_varlen = "flash_attention_varlen.fwd[fp16,d32,noncausal,B3,H2,Hkv1,Sq48,Sk48,lens=mixed,seed0]"
    equal_only = from_mapping({"unequal_lengths": False}, "test")
    assert "Sq != Sk" in equal_only.unsupported_reason(Case.from_id(mixed_square_varlen))


def test_the_plus_inf_convention_applies_to_windowed_and_varlen_empty_rows():
    plus_inf = Conventions(lse_empty_rows="+inf")
    assert plus_inf.applied(Case.from_id(VARLEN)) == {"lse_empty_rows": "+inf"}
    windowed = Case.from_id("flash_attention.fwd[bf16,d32,noncausal,B1,H2,Hkv2,Sq100,Sk40,lse,win8_0,seed0]")
    assert plus_inf.applied(windowed) == {"lse_empty_rows": "+inf"}


# --- varlen packing -------------------------------------------------------------------------

def test_packing_gathers_the_real_rows_and_unpacking_puts_them_back():
    case = Case.from_id(VARLEN)
    tensors = make_inputs(case, "cpu").tensors
    where = varlen.packing(case, "cpu")
    len_q, len_k = sequence_lengths(case)
    assert where.cu_seqlens_q.dtype == torch.int32 and where.cu_seqlens_q.tolist()[-1] == sum(len_q)
    packed_q = varlen.pack(tensors["q"], where.query_index)
    assert packed_q.shape == (sum(len_q), case.heads, case.head_dim) and packed_q.is_contiguous()
    assert varlen.pack(tensors["k"], where.key_index).shape == (sum(len_k), case.kv_heads, case.head_dim)
    start = sum(len_q[:3])
    assert torch.equal(packed_q[start:start + len_q[3]], tensors["q"][3, :, :len_q[3]].transpose(0, 1))
    back = varlen.unpack_rows(packed_q, where.query_index, case, case.heads, "out")
    padding = varlen.padding_rows(case, "cpu")[..., None].expand_as(back)
    assert torch.equal(back[~padding], tensors["q"][~padding]) and (back[padding] == 0).all()
    lse = varlen.unpack_lse(torch.zeros(case.heads, sum(len_q)), where.query_index, case)
    assert lse.shape == (case.batch, case.heads, case.seq_q)
    assert (lse[padding[..., 0]] == float("-inf")).all() and (lse[~padding[..., 0]] == 0).all()


def test_wrong_varlen_output_shapes_break_the_output_contract():
    case = Case.from_id(VARLEN)
    out = torch.zeros(sum(sequence_lengths(case)[0]), case.heads, case.head_dim)
    op = OPERATORS[case.op]
    with pytest.raises(TypeError, match=r"expected shape \(\d+, 2, head_dim\)"):
        op.outputs(case, (out[:-1], torch.zeros(case.heads, out.shape[0])))
    with pytest.raises(TypeError, match=r"lse of flash_attention_varlen: expected shape \(2, \d+\)"):
        op.outputs(case, (out, torch.zeros(case.batch, case.heads, case.seq_q)))


def test_padding_keeps_its_lse_under_the_plus_inf_convention():
    case = Case.from_id(VARLEN)
    padding = varlen.padding_rows(case, "cpu")
    lse = torch.zeros(case.batch, case.heads, case.seq_q).masked_fill(padding, float("-inf"))
    lse[0, 0, 0] = float("-inf")  # a real row that sees no key (sequence 0 has rows)
    declared = with_empty_row_lse({"lse": lse}, Conventions(lse_empty_rows="+inf"), padding)["lse"]
    assert declared[0, 0, 0] == float("inf")
    assert (declared[padding.expand_as(lse)] == float("-inf")).all()
