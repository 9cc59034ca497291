"""The false-alarm check: flake sets, seeds, the flake.md report and the `flake` command."""

import pytest

from conformance.cases.catalog import Case
from conformance.running.selection import reseeded
from conformance.cases.tiers import cases
from conformance.cli import main
from conformance.robustness import flake
from conformance.running.results import read_env


@pytest.mark.parametrize("tier", list(flake.FLAKE_SETS))
def test_flake_sets_are_groups_of_their_tier(tier):
    chosen = flake.flake_cases(tier)
    tier_ids = {case.id for case in cases(tier)}
    assert chosen and all(case.id in tier_ids and case.seed == 0 for case in chosen)
    assert len({case.data_key for case in chosen}) == len(chosen)
    # every operator, direction and dtype of the tier is sampled
    for field in ("op", "direction", "dtype"):
        assert {getattr(case, field) for case in chosen} >= {getattr(case, field) for case in cases(tier)} - {
            "fp8e4m3", "fp8e5m2"}


def test_no_flake_set_for_full():
    with pytest.raises(ValueError, match="no flake set for tier 'full'"):
        flake.flake_cases("full")


def test_reseeding_keeps_each_case_and_orders_by_case():
    base = flake.flake_cases("smoke")[:2]
    seeded = reseeded(base, 3)
    assert [case.id for case in seeded] == [case.id.replace("seed0", f"seed{s}") for case in base for s in range(3)]
    assert reseeded(base, None) == base
    with pytest.raises(ValueError, match="at least 1"):
        reseeded(base, 0)


def test_quantiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert [flake.quantile(values, q) for q in (0.5, 0.9, 0.99, 1.0)] == [50.0, 90.0, 99.0, 100.0]
    assert flake.quantile([3.0], 0.99) == 3.0


def _line(case_id: str, verdict: str, ratios: dict) -> dict:
    case = Case.from_id(case_id)
    tensors = [{"name": name, "ratio": ratio, "passed": ratio <= 2} for name, ratio in ratios.items()]
    return {"case": case_id, **case.fields(), "backend": "interpreter:cpu", "duration_s": 0.5,
            "verdict": verdict, "reason": "out ratio 2.5 > 2" if verdict == "fail" else "",
            "tensors": tensors, "worst_ratio": max(ratios.values()),
            "reproduce": f"python -m conformance run --case '{case_id}'"}


def test_the_report_counts_false_alarms_per_group_and_overall():
    group = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed{}]"
    other = "flash_attention.bwd[bf16,d64,noncausal,B1,H2,Hkv2,Sq128,Sk128,seed{}]"
    lines = [_line(group.format(seed), "pass", {"out": 0.5 + seed / 10}) for seed in range(4)]
    lines += [_line(other.format(0), "fail", {"dq": 2.5, "dk": 1.0, "dv": 0.9}),
              _line(other.format(1), "pass", {"dq": 1.5, "dk": 1.1, "dv": 0.8})]
    text = flake.render(lines)
    assert "2 case groups x 4 seeds = 6 judged cases of the bundled kernels on interpreter:cpu; " \
           "**1 false alarms (16.7%)**. Case time (sum over cases): 3 s." in text
    assert flake.group_rows(lines) == [
        ["`flash_attention.bwd[bf16,d64,noncausal,B1,H2,Hkv2,Sq128,Sk128]`", 2, 1, "50.0%", "2", "2.5", 0],
        ["`flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128]`", 4, 0, "0.0%", "0.65", "0.8", 3]]
    assert flake.tensor_rows(lines)[:2] == [["out", 4, "0.6", "0.8", "0.8", "0.8", "2.50x"],
                                            ["dq", 2, "1.5", "2.5", "2.5", "2.5", "0.80x"]]
    assert f"`{other.format(0)}`: fail, out ratio 2.5 > 2 -- `python -m conformance run --case '{other.format(0)}'`" \
        in text


def test_the_flake_command_runs_its_set_under_the_seeds(tmp_path, monkeypatch, capsys):
    grid = dict(direction=("fwd",), dtype=("fp16",), head_dim=(16,), causal=(True,), shape=[(1, 2, 2, 128, 128)])
    monkeypatch.setitem(flake.FLAKE_SETS, "smoke", (grid,))
    out = tmp_path / "flake"
    assert main(["flake", "--tier", "smoke", "--seeds", "2", "--out", str(out)]) == 0
    report = (out / flake.REPORT_FILE).read_text()
    assert "1 case groups x 2 seeds = 2 judged cases of the bundled kernels on interpreter:cpu; " \
           "**0 false alarms (0.0%)**" in report
    assert report in capsys.readouterr().out
    selection = read_env(out)["selection"]
    assert selection["seeds"] == 2 and selection["kernels"] == []
    assert selection["cases"] == ["flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq128,Sk128,seed0]"]
    assert main(["flake", "--resume", str(out)]) == 0  # nothing left to run; the report is rewritten
    assert (out / flake.REPORT_FILE).read_text() == report


def test_render_needs_a_run_folder(tmp_path, capsys):
    assert main(["flake", "--render", str(tmp_path)]) == 2
    assert "argument --render: no results.jsonl" in capsys.readouterr().err
