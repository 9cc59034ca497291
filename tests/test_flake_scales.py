"""The flake check across input distributions (conformance/robustness/flake_scales.py): presets, ulps,
and flake-scales.md rendered from per-distribution run folders."""

import json

import pytest

from conformance.cli import main
from conformance.robustness import flake_scales

CASE = "flash_attention.bwd[bf16,d32,causal,B2,H8,Hkv1,Sq1,Sk1000,seed0]"


def test_presets_and_lists():
    assert flake_scales.distributions("peers") == list(flake_scales.PEERS)
    assert "scaled:10" in flake_scales.PEERS and "scaled:4" in flake_scales.PEERS
    assert flake_scales.distributions("scaled:2, logits:8") == ["scaled:2", "logits:8"]
    with pytest.raises(ValueError, match="--distributions: expected peers"):
        flake_scales.distributions(" , ")


def test_ulps_at_the_references_magnitude():
    # bf16 keeps 7 fraction bits: at 101 (64 <= M < 128) one ulp is 0.5
    assert flake_scales.ulps(0.833, 101.0, "bf16") == pytest.approx(1.666)
    assert flake_scales.ulps(2.0**-10, 1.5, "fp16") == pytest.approx(1.0)
    assert flake_scales.ulps(1.0, 0.0, "bf16") is None


def _line(spec, ratio, passed):
    tensor = {"name": "dk", "kernel_err": 0.833, "torch_err": 0.395, "floor": 0.395, "magnitude": 101.0,
              "ratio": ratio, "nonfinite": 0, "passed": passed}
    return {"case": CASE, "op": "flash_attention", "direction": "bwd", "dtype": "bf16", "seed": 0,
            "verdict": "pass" if passed else "fail", "worst_ratio": ratio, "tensors": [tensor],
            "backend": "interpreter:cpu", "distribution": spec, "reproduce": f"python -m conformance run --case '{CASE}'"}


def test_the_report_dissects_every_tensor_over_the_bound(tmp_path, capsys):
    for spec, ratio, passed in (("scaled:2", 0.9, True), ("scaled:4", 2.11, False)):
        folder = tmp_path / flake_scales.folder_name(spec)
        folder.mkdir()
        (folder / "results.jsonl").write_text(json.dumps(_line(spec, ratio, passed)) + "\n")
    text = flake_scales.render(tmp_path)
    assert "1 case groups x 1 seeds x 2 distributions = 2 judged cases of the bundled kernels; **1 false alarms**" in text
    (row,) = [row for row in text.splitlines() if row.startswith("| bf16 ")]
    assert [cell.strip() for cell in row.split("|")[3:5]] == ["0.9", "2.11 [1]"]  # scaled:2, scaled:4
    (event,) = [row for row in text.splitlines() if row.startswith(f"| `{CASE}` | scaled:4")]
    assert "| 1.67 " in event and "| 0.79 " in event  # kernel and torch errors in ulps at M
    assert main(["flake", "--render", str(tmp_path)]) == 1  # a false alarm fails it
    assert (tmp_path / flake_scales.REPORT_FILE).exists()
    capsys.readouterr()


def test_distributions_with_a_single_distribution_is_a_usage_error(capsys):
    assert main(["flake", "--distributions", "peers", "--distribution", "scaled:2", "--out", "/nonexistent/x"]) == 2
    assert "not with --distribution" in capsys.readouterr().err
