"""The case catalog (ids, parsing, tiers) and seeded input generation."""

import dataclasses

import pytest
import torch

from conformance.backends import INTERPRETER, cuda_profile
from conformance.cases.catalog import (
    FP8_DTYPES,
    DTYPES,
    EXAMPLE_ID,
    Case,
    expand_grid,
    expand_tier,
)
from conformance.cases.inputs import generator_seed, make_inputs
from conformance.cases.variants import has_empty_rows
from conformance.cases.tiers import TIERS, cases, select

ALL_TIERS = list(TIERS)


# --- ids --------------------------------------------------------------------------

def test_id_format_is_exactly_the_documented_one():
    case = Case("flash_attention", "bwd", "bf16", 128, True, 2, 8, 2, 509, 1024, seed=0)
    assert case.id == EXAMPLE_ID == "flash_attention.bwd[bf16,d128,causal,B2,H8,Hkv2,Sq509,Sk1024,seed0]"


def test_feature_tokens_go_between_sk_and_seed():
    case = Case("flash_attention", "fwd", "fp16", 64, False, 1, 2, 2, 77, 133, seed=3, lse=True)
    assert case.id == "flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,lse,seed3]"
    assert case.data_key == "flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,lse]"


@pytest.mark.parametrize("tier", ALL_TIERS)
def test_every_tier_case_round_trips_through_its_id(tier):
    for case in cases(tier):
        assert Case.from_id(case.id) == case


def test_any_valid_case_round_trips():
    """Property test over the whole id space (hypothesis is optional in minimal environments)."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=200, deadline=None)
    @hypothesis.given(
        direction=st.sampled_from(["fwd", "bwd"]),
        dtype=st.sampled_from(DTYPES),
        head_dim=st.integers(1, 512),
        causal=st.booleans(),
        batch=st.integers(1, 64),
        kv_heads=st.integers(1, 8),
        group=st.integers(1, 8),
        seq_q=st.integers(1, 1 << 17),
        seq_k=st.integers(1, 1 << 17),
        seed=st.integers(0, 2**31 - 1),
        lse=st.booleans(),
    )
    def round_trips(direction, dtype, head_dim, causal, batch, kv_heads, group, seq_q, seq_k, seed, lse):
        direction = "fwd" if dtype in FP8_DTYPES else direction
        case = Case("flash_attention", direction, dtype, head_dim, causal, batch, kv_heads * group, kv_heads,
                    seq_q, seq_k, seed, lse and direction == "fwd")
        assert Case.from_id(case.id) == case

    round_trips()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "flash_attention",
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0",  # unclosed
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1]",  # no seed
        "flash_attention.side[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",
        "attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",
        "flash_attention.fwd[fp8,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",
        "flash_attention.bwd[fp8e4m3,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",  # fp8 is forward-only
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,NaN,seed0]",  # bad_input is nan or inf
        "flash_attention.fwd[fp16,64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",
        "flash_attention.fwd[fp16,d64,masked,B1,H2,Hkv2,Sq1,Sk1,seed0]",
        "flash_attention.fwd[fp16,d64,causal,B1,H3,Hkv2,Sq1,Sk1,seed0]",  # Hkv does not divide H
        "flash_attention.fwd[fp16,d64,causal,B0,H2,Hkv2,Sq1,Sk1,seed0]",
        "flash_attention.fwd[fp16,d064,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",  # not canonical
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,dropout,seed0]",  # unknown feature
        "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,lse,lse,seed0]",
        "flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,lse,seed0]",  # lse is forward-only
        " flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq1,Sk1,seed0]",
    ],
)
def test_malformed_ids_raise_a_one_line_value_error(text):
    with pytest.raises(ValueError, match="malformed case id") as raised:
        Case.from_id(text)
    assert "\n" not in str(raised.value)


def test_invalid_fields_raise():
    with pytest.raises(ValueError, match="kv_heads"):
        Case("flash_attention", "fwd", "fp16", 64, False, 1, 3, 2, 8, 8)


# --- tiers --------------------------------------------------------------------------

@pytest.mark.parametrize("tier", ALL_TIERS)
def test_ids_are_unique_and_order_is_deterministic(tier):
    ids = [case.id for case in cases(tier)]
    assert len(ids) == len(set(ids))
    assert ids == [case.id for case in cases(tier)]


def test_tier_sizes():
    # Issue 33 (FlashAttention-2's variants) raised the caps from 80 and 700: smoke 80 -> 92
    # (12 variant cases), standard 664 -> 924; issue 34 (KV-cache decoding): smoke 96, standard 1099.
    assert 40 <= len(cases("smoke")) <= 96
    assert 300 <= len(cases("standard")) <= 1100  # 1099
    standard = {case.id for case in cases("standard")}
    full = [case.id for case in cases("full")]
    assert standard <= set(full)
    assert all(Case.from_id(case_id).seq_k >= 4096 for case_id in set(full) - standard)


def test_smoke_covers_what_the_interpreter_must_exercise():
    smoke = cases("smoke")
    assert {(c.direction, c.dtype) for c in smoke} >= {(d, t) for d in ("fwd", "bwd") for t in ("fp16", "bf16")}
    assert {c.causal for c in smoke} == {False, True}
    assert any(c.dtype == "fp32" for c in smoke)
    assert any(c.kv_heads < c.heads for c in smoke), "GQA"
    assert any(c.seq_q != c.seq_k for c in smoke), "ragged"
    assert any(c.causal and c.seq_q > c.seq_k for c in smoke), "rows with no visible key"
    assert all(c.batch * c.heads * max(c.seq_q, c.seq_k) <= 1024 for c in smoke), "interpreter-sized"


@pytest.mark.parametrize("tier", ["smoke", "standard"])
def test_every_feature_is_in_smoke_and_standard(tier):
    """Issue 3: the smoke tier exercises at least one case of every feature."""
    selected = cases(tier)
    wanted = {
        "lse": lambda c: c.lse,
        "total": lambda c: c.total,
        "dropout fwd": lambda c: c.dropout and c.direction == "fwd",
        "dropout bwd": lambda c: c.dropout and c.direction == "bwd",
        "MQA": lambda c: c.kv_heads == 1 < c.heads,
        "non-power-of-two head dim": lambda c: c.head_dim & (c.head_dim - 1),
        "head dim 256": lambda c: c.head_dim == 256,
        "bshd layout": lambda c: c.layout == "bshd",
        "packed layout": lambda c: c.layout == "packed",
        "Sq = 1": lambda c: c.seq_q == 1,
        "Sk = 1": lambda c: c.seq_k == 1,
        "piecewise fwd": lambda c: c.op == "piecewise_attention" and c.direction == "fwd",
        "piecewise bwd": lambda c: c.op == "piecewise_attention" and c.direction == "bwd",
        "piecewise fp32": lambda c: c.op == "piecewise_attention" and c.dtype == "fp32",
        "piecewise MQA decode": lambda c: c.op == "piecewise_attention" and c.seq_q == 1 and c.kv_heads == 1,
        "fp8 e4m3": lambda c: c.dtype == "fp8e4m3",
        "fp8 e5m2": lambda c: c.dtype == "fp8e5m2",
        "NaN input fwd": lambda c: c.bad_input == "nan" and c.direction == "fwd",
        "NaN input bwd": lambda c: c.bad_input == "nan" and c.direction == "bwd",
        "Inf input": lambda c: c.bad_input == "inf",
        # FlashAttention-2's variants (issue 33)
        "window fwd": lambda c: c.window and c.direction == "fwd",
        "window bwd": lambda c: c.window and c.direction == "bwd",
        "window + causal + Sq != Sk": lambda c: c.window and c.causal and c.seq_q != c.seq_k,
        "window (0, 0)": lambda c: c.window == (0, 0),
        "window with rows that see no key": lambda c: c.window and has_empty_rows(c),
        "softcap fwd": lambda c: c.softcap and c.direction == "fwd",
        "softcap bwd": lambda c: c.softcap and c.direction == "bwd",
        "softcap bf16 at large logits": lambda c: c.softcap and c.dtype == "bf16" and c.values == "logits:64",
        "alibi with GQA": lambda c: c.alibi == "h" and 1 < c.kv_heads < c.heads,
        "alibi (B, H)": lambda c: c.alibi == "bh",
        "varlen fwd": lambda c: c.lens and c.direction == "fwd",
        "varlen bwd": lambda c: c.lens and c.direction == "bwd",
        "varlen + causal + window": lambda c: c.lens and c.causal and c.window,
        "varlen dropout + lse": lambda c: c.lens and c.dropout and c.lse,
        "varlen with a sequence without keys": lambda c: c.lens == "mixed" and c.batch >= 2,
        # KV-cache decoding (issue 34)
        "kv cache contiguous": lambda c: c.op == "kv_cache_attention" and c.page is None,
        "kv cache paged, shuffled": lambda c: c.page and c.table == "shuffled",
        "kv cache shared prefix": lambda c: c.table == "shared",
        "kv cache append": lambda c: c.append,
        "kv cache forced splits": lambda c: c.splits > 1,
        "kv cache heuristic splits": lambda c: c.op == "kv_cache_attention" and c.splits == 0,
        "kv cache causal, several new tokens": lambda c: c.op == "kv_cache_attention" and c.causal and c.seq_q > 1,
        "kv cache MQA": lambda c: c.op == "kv_cache_attention" and c.kv_heads == 1 < c.heads,
        "kv cache variants": lambda c: c.op == "kv_cache_attention" and (c.window or c.softcap or c.alibi),
    }
    missing = [name for name, present in wanted.items() if not any(present(c) for c in selected)]
    assert not missing


def test_standard_contents():
    standard = cases("standard")
    assert {c.head_dim for c in standard} == {16, 32, 64, 96, 128, 192, 256}
    assert {c.head_dim for c in standard if c.dtype == "fp32"} == {64, 128}
    piecewise = [c for c in standard if c.op == "piecewise_attention"]
    assert {c.head_dim for c in piecewise} == {16, 32, 64, 96, 128, 192, 256}
    assert {c.dtype for c in piecewise} == {"fp16", "bf16", "fp32"}
    assert {c.head_dim for c in standard if c.dtype.startswith("fp8")} == {16, 64, 128, 256}
    assert {(c.seq_q, c.seq_k) for c in standard} >= {(509, 509), (1000, 1000), (509, 1024), (1024, 509)}
    assert any(c.lse for c in standard) and all(c.direction == "fwd" for c in standard if c.lse or c.total)
    assert any(c.batch * c.heads > 65535 for c in standard), "grid axis limit"
    variants = [c for c in standard if c.window or c.softcap or c.alibi or c.lens]
    assert {c.dtype for c in variants} == {"fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2"}
    assert {c.head_dim for c in variants} == {16, 32, 64, 96, 128, 256}
    assert {c.batch for c in standard if c.lens} >= {16, 32, 1000}, "1 to 1,000 sequences"
    assert {c.lens for c in standard if c.lens} == {"equal", "paired", "mixed", "nonempty"}
    for variant in ("window", "softcap", "alibi", "lens"):
        chosen = [c for c in standard if getattr(c, variant)]
        assert {c.dtype for c in chosen} >= {"fp16", "bf16", "fp32"}, variant
        assert {c.direction for c in chosen} == {"fwd", "bwd"} and {c.causal for c in chosen} == {False, True}


def test_kv_cache_contents():
    """Issue 34's grid: every page size, split count, GQA ratio, cache length kind."""
    standard = [c for c in cases("standard") if c.op == "kv_cache_attention"]
    assert {c.page for c in standard} == {None, 1, 16, 64, 128, 256}
    assert {c.splits for c in standard} == {0, 1, 2, 3, 4, 8, 16}
    assert {c.heads // c.kv_heads for c in standard} >= {1, 4, 8, 16, 32}
    assert {c.seq_q for c in standard} == {1, 4, 16} and {c.table for c in standard} == {None, "shuffled", "shared"}
    assert {c.dtype for c in standard} == {"fp16", "bf16", "fp32"} and {c.lens for c in standard} == {"equal", "mixed", "nonempty"}
    assert {c.append for c in standard if c.causal and c.seq_q == 16} == {False, True}
    assert max(c.batch for c in standard) == 128
    long_caches = {c.seq_k for c in cases("full") if c.op == "kv_cache_attention"} - {c.seq_k for c in standard}
    assert max(long_caches) == 131072
    smoke = [c for c in cases("smoke") if c.op == "kv_cache_attention"]
    assert {c.page for c in smoke} >= {None, 1, 16} and {c.splits for c in smoke} >= {0, 2, 3}


def test_full_adds_long_sequences():
    long_cases = [c for c in cases("full") if c.seq_q >= 4096]
    assert {c.seq_q for c in long_cases} == {8192, 16384, 32768}
    # a varlen case's batch counts its sequences
    assert {(c.batch, c.heads) for c in long_cases if c.lens is None} == {(1, 16)}
    assert {(c.seq_q, c.window) for c in long_cases if c.window} >= {(8192, (1024, 0)), (16384, (1024, 0))}


def test_grid_expansion_deduplicates_in_first_seen_order():
    grid = dict(direction=["fwd"], dtype=["fp16"], head_dim=[16, 64], causal=[False], shape=[(1, 2, 2, 8, 8)])
    expanded = expand_tier([grid, dict(grid, head_dim=[64, 32])])
    assert [case.head_dim for case in expanded] == [16, 64, 32]


def test_unknown_grid_axis_and_unknown_tier_are_rejected():
    with pytest.raises(ValueError, match="unknown grid axes"):
        expand_grid(dict(direction=["fwd"], dtype=["fp16"], head_dim=[16], causal=[False],
                         shape=[(1, 1, 1, 1, 1)], sliding=[3]))
    with pytest.raises(ValueError, match="unknown tier 'nightly'"):
        cases("nightly")


def test_select_auto_uses_the_profile_default_and_ids_replace_the_tier():
    assert select("auto", [], INTERPRETER) == ("smoke", cases("smoke"))
    assert select("auto", [], cuda_profile((9, 0)))[0] == "standard"
    label, selected = select("full", [EXAMPLE_ID, EXAMPLE_ID], INTERPRETER)
    assert (label, [case.id for case in selected]) == ("cases", [EXAMPLE_ID])


def test_unsupported_reason_comes_from_the_profile():
    case = Case.from_id(EXAMPLE_ID)
    assert case.unsupported_reason(INTERPRETER) is None
    assert "bf16" in case.unsupported_reason(cuda_profile((7, 5)))


# --- inputs ---------------------------------------------------------------------------

SMALL = Case.from_id("flash_attention.bwd[bf16,d16,causal,B1,H4,Hkv2,Sq5,Sk7,seed0]")


def test_inputs_are_reproducible_and_shaped():
    first, second = make_inputs(SMALL, "cpu"), make_inputs(SMALL, "cpu")
    for name in ("q", "k", "v", "do"):
        assert torch.equal(getattr(first, name), getattr(second, name))
    assert first.q.shape == first.do.shape == (1, 4, 5, 16)
    assert first.k.shape == first.v.shape == (1, 2, 7, 16)
    assert first.q.dtype == torch.bfloat16
    assert first.q.requires_grad and first.k.requires_grad and not first.do.requires_grad


def test_forward_inputs_need_no_grad_and_have_no_do():
    forward = make_inputs(dataclasses.replace(SMALL, direction="fwd"), "cpu")
    assert forward.do is None and not forward.q.requires_grad


def test_seed_and_shape_both_change_the_data():
    base = make_inputs(SMALL, "cpu").q
    reseeded = make_inputs(dataclasses.replace(SMALL, seed=1), "cpu").q
    assert not torch.equal(base, reseeded)
    other_shape = dataclasses.replace(SMALL, seq_k=8)
    assert generator_seed(other_shape) != generator_seed(SMALL)
    assert not torch.equal(make_inputs(other_shape, "cpu").q, base)


def test_generator_seed_is_pinned():
    """Changing how seeds are derived changes every case's data: do it on purpose only."""
    assert generator_seed(Case.from_id(EXAMPLE_ID)) == 3398310416030367744
