"""FlashAttention-2's variants judged end to end (`python -m conformance run`) on plain-torch
doubles (tests/variant_doubles.py): the exact doubles pass every variant case of the smoke
tier, each deliberately wrong double fails where its fault shows, and a kernel that declares
a variant unsupported gets `unsupported` with its reason, not `error`."""

import pytest

from conformance.cases.catalog import expand_tier
from conformance.cases.tiers import SMOKE_VARIANTS
from conformance.cli import main
from conformance.running.results import read_results

DOUBLES = "tests.variant_doubles"
SMOKE_VARIANT_IDS = [case.id for case in expand_tier(SMOKE_VARIANTS)]
WINDOW = "flash_attention.bwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk133,win24_8,seed0]"
WINDOW_ZERO = "flash_attention.bwd[fp16,d32,noncausal,B1,H2,Hkv2,Sq64,Sk64,win0_0,seed0]"
ALIBI_H = "flash_attention.fwd[fp16,d32,causal,B1,H4,Hkv2,Sq64,Sk100,alibi,seed0]"
ALIBI_BH = "flash_attention.fwd[fp16,d32,noncausal,B2,H4,Hkv1,Sq64,Sk80,lse,alibi_bh,seed0]"
PLAIN = "flash_attention.fwd[fp16,d32,causal,B1,H2,Hkv1,Sq77,Sk133,lse,seed0]"
VARLEN_FWD = "flash_attention_varlen.fwd[fp16,d32,causal,B8,H2,Hkv1,Sq48,Sk64,lse,lens=mixed,seed0]"
VARLEN_BWD = "flash_attention_varlen.bwd[bf16,d32,causal,B8,H2,Hkv2,Sq64,Sk48,win16_0,lens=mixed,seed0]"
VARLEN_DROPOUT_BWD = "flash_attention_varlen.bwd[fp16,d32,noncausal,B6,H2,Hkv1,Sq64,Sk80,dropout0.2,lens=mixed,seed0]"


def run(tmp_path, flash: str, varlen: str, *case_ids: str) -> tuple[int, dict]:
    """(exit code, case id -> results line) of one run of the doubles named."""
    out = tmp_path / f"{flash}-{varlen}"
    argv = ["run", "--out", str(out), "--kernel", f"flash_attention={DOUBLES}:{flash}",
            "--kernel", f"flash_attention_varlen={DOUBLES}:{varlen}"]
    for case_id in case_ids:
        argv += ["--case", case_id]
    code = main(argv)
    return code, {line["case"]: line for line in read_results(out) if line.get("kind", "case") == "case"}


def test_the_exact_doubles_pass_every_variant_case_of_the_smoke_tier(tmp_path):
    code, lines = run(tmp_path, "flash_attention", "flash_attention_varlen", *SMOKE_VARIANT_IDS, VARLEN_DROPOUT_BWD)
    assert {case_id: line["verdict"] for case_id, line in lines.items()} == \
        {case_id: "pass" for case_id in (*SMOKE_VARIANT_IDS, VARLEN_DROPOUT_BWD)}
    assert code == 0
    assert lines[VARLEN_DROPOUT_BWD]["dropout_keep_rate"] == pytest.approx(0.8, abs=0.02)


def test_wrong_doubles_fail_where_their_fault_shows(tmp_path):
    code, lines = run(tmp_path, "window_off_by_one", "varlen_leaks_a_key",
                      WINDOW, WINDOW_ZERO, PLAIN, VARLEN_FWD, VARLEN_BWD)
    verdicts = {case_id: line["verdict"] for case_id, line in lines.items()}
    assert verdicts == {WINDOW: "fail", WINDOW_ZERO: "fail", PLAIN: "pass", VARLEN_FWD: "fail", VARLEN_BWD: "fail"}
    assert code == 1
    _, lines = run(tmp_path, "alibi_ignores_batch", "flash_attention_varlen", ALIBI_H, ALIBI_BH)
    assert (lines[ALIBI_H]["verdict"], lines[ALIBI_BH]["verdict"]) == ("pass", "fail")


def test_a_variant_declared_unsupported_is_unsupported_not_error(tmp_path):
    code, lines = run(tmp_path, "flash_without_variants", "flash_attention_varlen", WINDOW, ALIBI_BH, PLAIN)
    assert code == 0 and lines[PLAIN]["verdict"] == "pass"
    for case_id, words in ((WINDOW, "no sliding window"), (ALIBI_BH, "no ALiBi")):
        assert lines[case_id]["verdict"] == "unsupported"
        assert words in lines[case_id]["reason"] and "predates FlashAttention-2's variants" in lines[case_id]["reason"]


def test_varlen_plus_inf_lse_passes_as_declared_with_padding_left_alone(tmp_path):
    """Sequence lengths 0 leave real rows without keys (+inf, declared); padding is no row."""
    code, lines = run(tmp_path, "flash_attention", "varlen_lse_plus_inf", VARLEN_FWD)
    assert code == 0 and lines[VARLEN_FWD]["verdict"] == "pass"
    assert lines[VARLEN_FWD]["conventions"] == {"lse_empty_rows": "+inf"}
