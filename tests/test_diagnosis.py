"""Diagnosis of failing cases (conformance.diagnosing): the error in ulps, where the excess
sits, the fault pattern named from it, and the shrinker.

Faults are planted in torch (no kernel needed) where a test is about the localization
itself; a few real mutants on the interpreter show the same patterns come out of a run."""

import math

import pytest
import torch

from conformance import backends
from conformance.bundled.mutants.registry import kernel_specs
from conformance.bundled.reference import MATCHED, REFERENCE, attention_forward
from conformance.cases.catalog import Case
from conformance.diagnosing import diagnosis, error_spread, fault_patterns, shrinking
from conformance.diagnosing.geometry import geometry
from conformance.diagnosing.localization import Profiles
from conformance.judging.rule import compare_tensor
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case
from conformance.cli import main


def _case(**fields) -> Case:
    base = dict(op="flash_attention", direction="fwd", dtype="fp16", head_dim=64, causal=False, batch=1,
                heads=2, kv_heads=2, seq_q=256, seq_k=256)
    return Case(**{**base, **fields})


# --- error spread ---------------------------------------------------------------------

def test_ulps_count_the_dtype_spacing_at_the_reference_magnitude():
    ref = torch.tensor([1.0, 3.0, -0.5, 1e-9], dtype=torch.float64)
    spacing = torch.tensor([2.0**-10, 2.0**-9, 2.0**-11, 2.0**-24])  # fp16 at 1, 3, 0.5, and 2^-14 floor
    actual = ref + torch.tensor([1, 2, 3, 0.5], dtype=torch.float64) * spacing
    assert error_spread.ulps(actual, ref, "fp16").tolist() == pytest.approx([1, 2, 3, 0.5])


def test_spread_tells_an_outlier_from_a_systematic_error():
    ref = torch.linspace(1, 2, 1000, dtype=torch.float64)
    outlier = ref.clone()
    outlier[3] += 0.5
    systematic = ref * (1 + 2.0**-8)
    # 3 fp16 ulps (2^-10 in [1, 2)) off everywhere; 1.5 at ref = 2, where the ulp is 2^-9
    torch_path = ref + 3 * 2.0**-10
    one, every = (error_spread.spread(kernel, torch_path, ref, "fp16") for kernel in (outlier, systematic))
    assert one["median"] == 0 and every["median"] >= 2
    assert one["torch_median"] == every["torch_median"] == 3 and one["torch_p99"] == every["torch_p99"] == 3


# --- localization of planted faults ---------------------------------------------------

def _inputs(case: Case, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    shape_q = (case.batch, case.heads, case.seq_q, case.head_dim)
    shape_kv = (case.batch, case.kv_heads, case.seq_k, case.head_dim)
    q, k, v = (torch.randn(shape, generator=generator).half() for shape in (shape_q, shape_kv, shape_kv))
    return {"q": q, "k": k, "v": v}


def _where(case: Case, kernel: torch.Tensor, inputs: dict, ref: torch.Tensor, tiles=None) -> dict:
    torch_path = attention_forward(*(inputs[n] for n in "qkv"), causal=case.causal, precision=MATCHED)[0]
    record = compare_tensor("out", kernel, torch_path, ref, "fp16")
    assert not record["passed"], "the planted fault must fail the rule"
    return diagnosis.where(case, record, kernel, ref, inputs, None, tiles=tiles)


def _reference(case: Case, inputs: dict, **changes):
    q, k, v = (inputs[n].double() for n in "qkv")
    return attention_forward(q, k, v, causal=changes.get("causal", case.causal), precision=REFERENCE)[0]


def test_hidden_diagonal_key_is_the_causal_band():
    case = _case(causal=True, seq_q=512, seq_k=512)
    inputs = _inputs(case)
    ref = _reference(case, inputs)
    q, k, v = (inputs[n].double() for n in "qkv")
    scores = q @ k.transpose(-1, -2) / 8
    hidden = torch.ones(512, 512).tril(-1).bool()            # j < i: the diagonal key hidden
    weights = torch.softmax(scores.masked_fill(~hidden, -math.inf), dim=-1).nan_to_num()
    kernel = (weights @ v).half()
    where = _where(case, kernel, inputs, ref)
    assert where["pattern"] == "the causal diagonal band", where["evidence"]


def test_unmasked_zero_padding_is_the_last_partial_key_block():
    case = _case(seq_q=100, seq_k=200)
    inputs = _inputs(case)
    ref = _reference(case, inputs)
    padded = {n: torch.nn.functional.pad(inputs[n], (0, 0, 0, 56)) if n != "q" else inputs[n] for n in "qkv"}
    kernel = attention_forward(*(padded[n].double() for n in "qkv"), precision=REFERENCE)[0].half()
    where = _where(case, kernel, inputs, ref)
    assert where["pattern"] == "the last partial key block", where["evidence"]
    assert where["row_scaling_share"] > 0.5 and where["padding_keys"] == pytest.approx(56, rel=0.05)


def test_a_scale_is_a_common_factor_and_a_ragged_tail_the_last_row_block():
    case = _case(seq_q=200, seq_k=128)
    inputs = _inputs(case, seed=1)
    ref = _reference(case, inputs)
    scaled = _where(case, (ref * 1.01).half(), inputs, ref)
    assert scaled["pattern"] == "every element by a common factor" and scaled["common_factor"] == pytest.approx(1.01)
    tail = ref.clone()
    tail[:, :, 192:] += 0.1
    ragged = _where(case, tail.half(), inputs, ref, tiles=(64, 64))
    assert ragged["pattern"] == "the last partial query block", ragged["evidence"]
    assert ragged["rows_at_tile"]["top"][0] == [3, 1.0]


def test_a_wrong_head_map_is_the_kv_head_mapping():
    case = _case(batch=2, heads=8, kv_heads=2, seq_q=64, seq_k=64)
    inputs = _inputs(case)
    ref = _reference(case, inputs)
    wrong = {**inputs, "k": inputs["k"].repeat_interleave(4, 1)[:, [0, 4, 0, 4, 0, 4, 0, 4]],
             "v": inputs["v"].repeat_interleave(4, 1)[:, [0, 4, 0, 4, 0, 4, 0, 4]]}
    kernel = attention_forward(*(wrong[n].double() for n in "qkv"), precision=REFERENCE)[0].half()
    where = _where(case, kernel, inputs, ref)
    assert where["pattern"] == "the kv-head mapping (GQA)" and "heads 1,3,4,6" in where["evidence"]


# --- fault patterns on hand-made profiles ---------------------------------------------

def _profiles(rows, slices=None, columns=None, factor=None, largest=0.01, batch=3, heads=2) -> Profiles:
    rows = torch.tensor(rows, dtype=torch.float64)
    slices = torch.tensor(slices, dtype=torch.float64) if slices else torch.full((batch, heads), 1 / (batch * heads))
    return Profiles(total=1.0, elements=rows.numel() * 64, offending=10,
                    slices=slices.double(), rows=rows / rows.sum(),
                    columns=None if columns is None else torch.tensor(columns, dtype=torch.float64),
                    largest_element=largest, factor=factor, nonfinite=0)


def test_rows_that_see_no_key_are_named_before_any_block():
    g = geometry(_case(causal=True, seq_q=100, seq_k=60), "out")
    pattern, evidence = fault_patterns.name(_profiles([1.0] * 40 + [0.0] * 60, batch=1), g)
    assert pattern == "rows with no visible key" and "first 40 query rows" in evidence


def test_head_dim_tail_batch_offset_dropout_and_unclassified():
    g = geometry(_case(batch=3, dropout=0.25), "out")
    tail = [0.0] * 48 + [1 / 16] * 16
    assert fault_patterns.name(_profiles([1.0] * 256, columns=tail), g)[0] == "a head-dim tail"
    offset = [[0.0, 0.0], [0.3, 0.2], [0.25, 0.25]]
    assert fault_patterns.name(_profiles([1.0] * 256, slices=offset), g)[0] == "every batch but the first"
    assert fault_patterns.name(_profiles([1.0] * 256, factor=0.75), g)[0] == "dropout-kept elements only"
    scattered = [1.0 if i in (5, 77, 150) else 0.0 for i in range(256)]
    assert fault_patterns.name(_profiles(scattered, slices=[[1 / 6, 1 / 6]] * 3), g)[0] == "unclassified"


def test_the_more_specific_of_two_matching_patterns_wins_and_unclassified_ranks_last():
    g = geometry(_case(batch=3), "out")
    # 95% of the excess in one element, which lies in one (batch, head) slice: both match
    both = _profiles([1.0] * 256, slices=[[0.95, 0.01], [0.01, 0.01], [0.01, 0.01]], largest=0.95)
    assert fault_patterns.one_element(both, g) and fault_patterns.one_slice(both, g)
    assert fault_patterns.name(both, g)[0] == "one element"
    # the case's pattern is its most specific tensor's, wherever that tensor stands
    tensors = [{"name": name, "where": {"pattern": pattern}} for name, pattern in
               (("dq", "unclassified"), ("dk", "one element"), ("dv", "one (batch, head) slice"))]
    assert diagnosis.case_pattern(tensors) == "dk: one element"
    unclassified = tensors[0]
    for pattern in fault_patterns.PATTERN_CHECK:
        named = {"name": "dk", "where": {"pattern": pattern}}
        assert diagnosis.case_pattern([unclassified, named]) == f"dk: {pattern}"


# --- shrinking ------------------------------------------------------------------------

def test_shrink_finds_the_smallest_case_that_keeps_the_failure_deterministically():
    start = _case(direction="bwd", batch=4, heads=8, kv_heads=2, seq_q=509, seq_k=300, head_dim=128)
    fails = lambda case: "fail" if case.seq_k % 16 and case.heads > case.kv_heads else "pass"  # noqa: E731
    first = shrinking.shrink(start, fails, lambda case: True, 60, "fail")
    again = shrinking.shrink(start, fails, lambda case: True, 60, "fail")
    assert first == again._replace(seconds=first.seconds) and first.complete
    smallest = first.case
    assert (smallest.batch, smallest.heads, smallest.kv_heads, smallest.seq_q, smallest.seq_k, smallest.head_dim) \
        == (1, 2, 1, 1, 1, 16)
    assert (smallest.dtype, smallest.direction, smallest.causal) == ("fp16", "bwd", False)


def test_shrink_stops_at_its_budget_with_the_best_so_far():
    ticks = iter(range(1000))
    found = shrinking.shrink(_case(batch=4), lambda case: "fail", lambda case: True, 3, "fail",
                             clock=lambda: next(ticks))
    assert not found.complete and found.tried <= 3 and shrinking.cost(found.case) < shrinking.cost(_case(batch=4))


def test_shrink_command_refuses_an_unknown_id_and_a_passing_case(capsys):
    assert main(["shrink", "flash_attention.fwd[nonsense]", "--backend", "interpreter"]) == 2
    assert "argument CASE_ID: malformed case id" in capsys.readouterr().err
    passing = "flash_attention.fwd[fp16,d16,noncausal,B1,H1,Hkv1,Sq16,Sk16,seed0]"
    assert main(["shrink", passing, "--backend", "interpreter"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "does not fail here (pass): nothing to shrink" in error


# --- real mutants on the interpreter ----------------------------------------------------

@pytest.mark.parametrize("mutant, case_id, tensor, pattern", [
    ("causal_off_by_one", "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]", "out",
     "the causal diagonal band"),
    ("ragged_keys_unmasked", "flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,seed0]", "out",
     "the last partial key block"),
    ("gqa_heads_interleaved", "flash_attention.fwd[fp16,d32,noncausal,B2,H8,Hkv2,Sq64,Sk64,seed0]", "out",
     "the kv-head mapping (GQA)"),
    ("dq_unscaled", "flash_attention.bwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq64,Sk64,seed0]", "dq",
     "every element by a common factor"),
    ("row_sum_not_rescaled", "flash_attention.fwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq77,Sk133,seed0]", "out",
     "each row scaled by its own factor"),
    # Faults of a tile need room to show: at 512 rows (the smoke tier's kills are 64..130)
    ("causal_band_one_block_late", "flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq512,Sk512,seed0]", "out",
     "the causal diagonal band"),
    ("dkdv_block_lost", "flash_attention.bwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq512,Sk512,seed0]", "dk",
     "one query block"),
])
def test_mutants_are_localized_to_their_natural_pattern(mutant, case_id, tensor, pattern):
    profile = backends.activate("interpreter")
    line = run_case(Case.from_id(case_id), profile, Implementations.from_specs(kernel_specs(mutant)))
    assert line["rule_verdict"] == "fail"
    assert line["fault_pattern"] == f"{tensor}: {pattern}"
    where = next(t["where"] for t in line["tensors"] if t["name"] == tensor)
    assert where["rows"]["grid"] == 64 and where["slices"]["of"] == Case.from_id(case_id).batch * \
        Case.from_id(case_id).heads


def test_the_other_axis_is_recorded_at_the_kernels_tile_too():
    profile = backends.activate("interpreter")
    case = Case.from_id("flash_attention.bwd[fp16,d64,noncausal,B1,H2,Hkv2,Sq512,Sk512,seed0]")
    line = run_case(case, profile, Implementations.from_specs(kernel_specs("dkdv_block_lost")))
    where = next(t["where"] for t in line["tensors"] if t["name"] == "dk")
    at_tile = where["query_blocks_at_tile"]
    assert at_tile["grid"] == where["rows_at_tile"]["grid"] == 64  # the interpreter table's dK/dV tiles
    assert at_tile["top"][0] == [0, 1.0]  # the dK/dV loop's first query tile, lost


def test_profiles_do_not_depend_on_how_the_slices_are_chunked(monkeypatch):
    from conformance.diagnosing import localization

    generator = torch.Generator().manual_seed(3)
    ref = torch.randn(2, 3, 50, 16, generator=generator, dtype=torch.float64)
    kernel = ref + 0.01 * torch.randn(2, 3, 50, 16, generator=generator, dtype=torch.float64)
    kernel[1, 2, 7, 3] = math.nan
    whole = localization.profiles(kernel, ref, 1e-3)
    monkeypatch.setattr(localization, "CHUNK_ELEMENTS", 50 * 16)  # one slice at a time
    sliced = localization.profiles(kernel, ref, 1e-3)
    for name in ("slices", "rows", "columns"):
        assert torch.allclose(getattr(whole, name), getattr(sliced, name), rtol=1e-12, atol=0), name
    assert (whole.offending, whole.nonfinite, whole.largest_element) == pytest.approx(
        (sliced.offending, sliced.nonfinite, sliced.largest_element), rel=1e-12)
    assert whole.factor == sliced.factor


def test_the_tiles_of_a_windowed_case_are_those_its_kernels_launch_with(monkeypatch):
    """Localization's tile geometry reads the tables the kernels take (kernels.problem.table_choice):
    a band's own table where it serves the band, and the kernel's own otherwise."""
    from conformance.bundled.kernels import tuning
    from conformance.diagnosing.geometry import bundled_tiles

    banded = tuning.LaunchConfig(16, 16)
    tables = dict(tuning.INTERPRETER_LAUNCH)
    for kernel in ("fwd", "bwd_dq"):
        tables[f"{kernel}.window"] = tuning.table((256, banded), widest_band=100)
    monkeypatch.setattr(tuning, "INTERPRETER_LAUNCH", tables)
    plain = tuning.INTERPRETER_LAUNCH["fwd"].pick(64)
    for window, expected in (("win8_0", (16, 16)), ("win200_0", (plain.block_m, plain.block_n))):
        case = Case.from_id(f"flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv2,Sq96,Sk96,{window},seed0]")
        assert bundled_tiles(case, "out") == expected and bundled_tiles(case, "dq") == expected, window
    dkdv = tuning.INTERPRETER_LAUNCH["bwd_dkdv"].pick(64)
    assert bundled_tiles(Case.from_id("flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv2,Sq96,Sk96,win8_0,seed0]"),
                         "dk") == (dkdv.block_m, dkdv.block_n)
