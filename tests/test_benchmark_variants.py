"""The attention-variants benchmark without a GPU: its grid and time estimate, the visible
pairs (against a brute-force count), the FLOPs of windows and packed batches, the
FlexAttention peers' masks and score mods (eager Flex against the bundled kernels on the
interpreter), the report's ratios and targets rendered from a hand-made benchmark.jsonl,
the no-GPU exit, and the measuring loop on the CPU."""

import json
import statistics
import xml.etree.ElementTree as ElementTree

import pytest
import torch

from conformance import backends
from conformance.bundled.benchmarks import (grid, implementations, run, timing, variants, variants_benchmark,
                                            variants_report)
from conformance.bundled.benchmarks.timing import RepetitionPolicy
from conformance.bundled.benchmarks.variants import Entry, Plan
from tests.test_benchmark import wall_clock_calls

SVG = "{http://www.w3.org/2000/svg}"
NAMES = ["bundled causal", "bundled window 1024", "flex window 1024", "bundled window 4096", "flex window 4096",
         "bundled varlen", "bundled softcap 30", "flex softcap 30", "bundled softcap_large 30",
         "flex softcap_large 30", "bundled alibi", "flex alibi"]


# ----------------------------------------------------------------------------- the grid

def test_the_default_grid_is_the_issues_in_bf16_and_quick_is_one_cell():
    full, issue, quick = Plan(**variants.FULL), Plan(**variants.ISSUE), Plan(**variants.QUICK)
    assert [(p.dtype, p.head_dim, p.seq_len) for p in full.cells()] == [
        ("bf16", 64, 8192), ("bf16", 64, 16384), ("bf16", 128, 8192), ("bf16", 128, 16384)]
    assert {(p.dtype, p.head_dim, p.seq_len) for p in issue.cells()} == {
        (dtype, d, s) for dtype in ("fp16", "bf16") for d in (64, 128) for s in (8192, 16384)}
    for problem in issue.cells():  # the flash benchmark's shapes, every cell causal
        assert problem == grid.Problem.sized(problem.dtype, problem.head_dim, True, problem.seq_len)
        assert problem.batch * problem.seq_len == 32 * 1024 and problem.heads * problem.head_dim == 2048
    (cell,) = quick.cells()
    assert (cell.dtype, cell.head_dim, cell.seq_len) == ("bf16", 128, 8192)
    assert [entry.name for entry in quick.entries(cell)] == NAMES


def test_flex_runs_only_at_the_chosen_s_and_variants_can_be_left_out():
    plan = Plan(**variants.FULL, flex_seq_lens=(8192,), variants=("window", "alibi"), windows=(512,))
    names = {p.seq_len: [entry.name for entry in plan.entries(p)] for p in plan.cells()}
    assert names[8192] == ["bundled causal", "bundled window 512", "flex window 512", "bundled alibi", "flex alibi"]
    assert names[16384] == ["bundled causal", "bundled window 512", "bundled alibi"]
    args = variants_benchmark.parse_args(["--quick", "--flex-seq-lens", "none", "--windows", "256"])
    assert variants_benchmark.plan_of(args) == Plan(seq_lens=(8192,), head_dims=(128,), dtypes=("bf16",),
                                                    windows=(256,), flex_seq_lens=())
    with pytest.raises(SystemExit):
        variants_benchmark.parse_args(["--variants", "window,dropout"])


def test_the_estimates_fit_the_gpu_budgets_and_help_states_them(capsys):
    """--quick under 2 minutes (Flex's compilations included), the default grid under the
    ~4 minutes of one run, the issue's grid (fp16 too) over it: hence the default."""
    quick = Plan(**variants.QUICK).estimate_s(quick=True)
    full, issue = Plan(**variants.FULL).estimate_s(), Plan(**variants.ISSUE).estimate_s()
    assert quick < 120 and full < 240 < issue
    assert Plan(**variants.FULL, flex_seq_lens=()).estimate_s() < full
    # softcap_large compiles nothing (softcap's functions on other inputs): only its calls are
    # added, 2 entries x 2 directions x 4 cells; a second window is a Flex compilation of its own.
    without = Plan(**variants.FULL, variants=("window", "varlen", "softcap", "alibi")).estimate_s()
    assert full - without == pytest.approx(16 * variants.ESTIMATE["timed_s"])
    one_window = Plan(**variants.FULL, windows=(1024,)).estimate_s()
    assert full - one_window == pytest.approx(16 * variants.ESTIMATE["timed_s"] + variants.ESTIMATE["flex_first_s"]
                                              + 3 * variants.ESTIMATE["flex_reshape_s"])
    with pytest.raises(SystemExit):
        variants_benchmark.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"--quick ~{quick / 60:.1f} min" in text and f"the default grid ~{full / 60:.1f} min" in text
    assert f"--dtypes fp16,bf16, ~{issue / 60:.1f} min" in text


def test_large_logit_softcap_calls_softcaps_functions_on_q_times_8(monkeypatch):
    """softcap_large times the softcap functions themselves (one Flex compilation) on the
    cell's k and v and a q of its own, 8 times the cell's: scaled scores of std 8."""
    monkeypatch.setattr(run, "DEVICE", "cpu")
    plan = Plan(seq_lens=(32,), head_dims=(16,), dtypes=("fp16",), variants=("softcap", "softcap_large"),
                tokens=64, width=32)
    (problem,) = plan.cells()
    _, functions, _ = variants_benchmark._cell_functions(plan, problem)
    for kernel in ("bundled", "flex"):
        maker, (q, k, v) = functions[f"{kernel} softcap 30"]
        large_maker, (large_q, large_k, large_v) = functions[f"{kernel} softcap_large 30"]
        assert large_maker is maker and large_k is k and large_v is v
        assert large_q.is_leaf and large_q.requires_grad and torch.equal(large_q, q.detach() * variants.LARGE_LOGITS)
    assert functions["flex softcap_large 30"][1][0] is functions["bundled softcap_large 30"][1][0]  # made once


# ----------------------------------------------------------------------------- pairs and FLOPs

def _brute_force_pairs(seq_q, seq_k, causal, window):
    left, right = (-1, -1) if window is None else window
    right = 0 if causal else right
    rows, cols = torch.arange(seq_q)[:, None] + seq_k - seq_q, torch.arange(seq_k)[None, :]
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool)
    if left >= 0:
        mask &= cols >= rows - left
    if right >= 0:
        mask &= cols <= rows + right
    return int(mask.sum())


@pytest.mark.parametrize("seq_q,seq_k", [(1, 1), (7, 7), (16, 16), (33, 33), (5, 12), (12, 5), (0, 4)])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (True, (0, 0)), (True, (3, 0)),
                                           (True, (40, 0)), (False, (2, 5)), (False, (-1, 3)), (False, (4, -1))])
def test_visible_pairs_match_a_brute_force_count(seq_q, seq_k, causal, window):
    assert variants.visible_pairs(seq_q, seq_k, causal, window) == _brute_force_pairs(seq_q, seq_k, causal, window)


def test_band_fraction_is_the_windows_pairs_over_causals():
    # S = 8, left 2: rows see 1, 2, 3, 3, 3, 3, 3, 3 keys; causal 1 + ... + 8 = 36
    assert variants.band_fraction(8, 2) == 21 / 36
    assert variants.band_fraction(8, 7) == variants.band_fraction(8, 100) == 1.0
    for seq_len, left in ((64, 5), (100, 31), (48, 0)):
        band, causal = (_brute_force_pairs(seq_len, seq_len, True, window) for window in ((left, 0), None))
        assert variants.band_fraction(seq_len, left) == pytest.approx(band / causal, rel=1e-15)
    # closed form at the grid's sizes: (w+1)(w+2)/2 + (S-w-1)(w+1) over S(S+1)/2
    for seq_len, left in ((8192, 1024), (16384, 4096)):
        band = (left + 1) * (left + 2) // 2 + (seq_len - left - 1) * (left + 1)
        assert variants.band_fraction(seq_len, left) == band / (seq_len * (seq_len + 1) // 2)


def test_flops_count_the_visible_pairs_only():
    dense = grid.Problem.sized("bf16", 128, True, 8192)
    full_pairs = dense.batch * dense.seq_len**2
    assert variants.pair_flops(full_pairs, dense.heads, 128, "fwd") == grid.attention_flops(
        dense.batch, dense.heads, 8192, 8192, 128, False, "fwd")
    assert variants.pair_flops(10, 2, 64, "bwd") == 2.5 * 4 * 10 * 2 * 64
    causal = variants.result_line(Entry("bundled", "causal"), dense, "fwd")
    assert causal["pairs"] == causal["causal_pairs"] == 4 * 8192 * 8193 // 2
    assert causal["flops"] == pytest.approx(dense.flops("fwd") * 8193 / 8192)  # S(S+1)/2 against the flash S²/2
    window = variants.result_line(Entry("flex", "window", 1024), dense, "bwd")
    assert window["pairs"] == 4 * variants.visible_pairs(8192, 8192, True, (1024, 0))
    assert window["band_fraction"] == variants.band_fraction(8192, 1024)
    assert window["flops"] == 2.5 * 4 * window["pairs"] * 16 * 128
    lengths = [5, 1, 20]
    varlen = variants.result_line(Entry("bundled", "varlen"), dense, "fwd", lengths)
    assert varlen["pairs"] == 15 + 1 + 210 and varlen["batch"] == 3 and varlen["lengths"] == lengths
    assert varlen["flops"] == 4 * 226 * 16 * 128 and varlen["impl"] == "bundled varlen"


@pytest.mark.parametrize("seq_len", [8192, 16384])
def test_varlen_lengths_hold_the_tokens_in_mixed_lengths_of_mean_s_over_4(seq_len):
    lengths = variants.varlen_lengths(seq_len)
    assert sum(lengths) == 32 * 1024 and max(lengths) <= seq_len and min(lengths) >= 1
    assert statistics.mean(lengths) == seq_len / 4 and len(set(lengths)) == len(lengths)
    assert max(lengths) > seq_len / 2 and statistics.median(lengths) < seq_len / 4  # mixed: a few long, most short
    assert lengths == variants.varlen_lengths(seq_len) != sorted(lengths)  # deterministic, shuffled
    assert sum(variants.varlen_lengths(37, 100)) == 100


def test_alibi_slopes_are_the_standard_geometric_sequence():
    slopes = variants.alibi_slopes(16)
    assert slopes[0] == 2**-0.5 and slopes[-1] == 2**-8
    assert all(b / a == pytest.approx(2**-0.5) for a, b in zip(slopes, slopes[1:]))
    assert variants.alibi_slopes(8) == [2.0**-(h + 1) for h in range(8)]


# ----------------------------------------------------------------------------- Flex peers

@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_the_flex_peers_compute_what_the_bundled_variants_compute():
    """Forward, fp32, eager flex_attention (the benchmark compiles it) against the bundled
    kernels on the interpreter: the same mask and scores, so the timings compare like with like."""
    from torch.nn.attention.flex_attention import flex_attention

    profile = backends.activate()  # the interpreter on a CPU, before the kernels are imported
    problem = grid.Problem("fp32", 16, True, 64, 2, 4)
    q, k, v = (torch.randn(problem.shape, generator=torch.Generator().manual_seed(i), device=profile.device)
               for i in range(3))
    slopes = torch.tensor(variants.alibi_slopes(problem.heads), device=profile.device)
    for variant, param in (("window", 5), ("window", 40), ("softcap", 0.5), ("alibi", None)):
        flex = variants.flex_function(Entry("flex", variant, param), 64, profile.device, slopes, flex_attention)
        bundled = variants.bundled_function(Entry("bundled", variant, param), slopes)
        torch.testing.assert_close(flex(q, k, v, True), bundled(q, k, v, True), atol=2e-5, rtol=1e-5)


def test_the_window_mask_mod_is_the_bottom_right_causal_band():
    for seq_q, seq_k, left in ((16, 16, 3), (8, 20, 5), (20, 20, 0)):
        mask_mod = variants.window_mask_mod(seq_q, seq_k, left)
        mask = mask_mod(None, None, torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :])
        assert int(mask.sum()) == variants.visible_pairs(seq_q, seq_k, True, (left, 0))
        assert bool(mask[-1, -1]) and (left == 0 or bool(mask[-1, -1 - left])) and not bool(mask[-1, -2 - left])


# ----------------------------------------------------------------------------- the report

MS = {  # (name, direction) -> median ms of the hand-made run (bf16, D 128, S 8192)
    ("bundled causal", "fwd"): 4.0, ("bundled causal", "bwd"): 10.0,
    ("bundled window 1024", "fwd"): 1.0, ("bundled window 1024", "bwd"): 2.5,
    ("flex window 1024", "fwd"): 1.1, ("flex window 1024", "bwd"): 2.4,
    ("bundled window 4096", "fwd"): 3.9, ("bundled window 4096", "bwd"): 8.0,
    ("flex window 4096", "fwd"): 4.0, ("flex window 4096", "bwd"): 9.0,
    ("bundled softcap 30", "fwd"): 4.4, ("bundled softcap 30", "bwd"): 12.0,
    ("flex softcap 30", "fwd"): 5.0, ("flex softcap 30", "bwd"): 11.0,
    ("bundled softcap_large 30", "fwd"): 4.4, ("bundled softcap_large 30", "bwd"): 12.0,
    ("flex softcap_large 30", "fwd"): 4.0, ("flex softcap_large 30", "bwd"): 13.0,
    ("bundled alibi", "fwd"): 4.2, ("bundled alibi", "bwd"): 11.0,
    ("flex alibi", "fwd"): 5.0,  # its backward errs
}
VARLEN_TFLOPS_RATIO = {"fwd": 0.95, "bwd": 0.85}


def _fake_lines() -> list[dict]:
    plan = Plan(**variants.QUICK)
    (problem,) = plan.cells()
    lengths = variants.varlen_lengths(problem.seq_len)
    lines = []
    for direction in grid.DIRECTIONS:
        dense_tflops = None
        for entry in plan.entries(problem):
            line = variants.result_line(entry, problem, direction, lengths)
            if entry.variant == "varlen":
                median = line["flops"] / (VARLEN_TFLOPS_RATIO[direction] * dense_tflops * 1e9)
            else:
                median = MS.get((entry.name, direction))
            if median is None:
                line.update(status="error", reason="RuntimeError: fake failure for the test")
            else:
                line.update(median_ms=median, tflops=grid.tflops(line["flops"], median), peak_bytes=2**20 * 64,
                            reps=3, samples_ms=[median] * 3)
            if entry.variant == "causal":
                dense_tflops = line["tflops"]
            lines.append(line)
    return lines


@pytest.fixture
def recorded(tmp_path):
    """A run folder holding a hand-made benchmark.jsonl and env.json."""
    (tmp_path / "benchmark.jsonl").write_text("".join(json.dumps(line) + "\n" for line in _fake_lines()))
    env = {"device": "hand-made test fixture", "torch": "2.11.0", "triton": "3.6.0",
           "benchmark": {"repetitions": {"target_ms": 20.0, "min_reps": 3, "max_reps": 5, "warmup_ms": 0.0,
                                         "rounds": 1}, "plan": {"windows": [1024, 4096]}}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    return tmp_path


def test_the_ratios_of_each_target():
    judged = {(item["target"], item["param"], item["direction"]): item
              for item in variants_report.ratios(_fake_lines())}
    f1024, f4096 = variants.band_fraction(8192, 1024), variants.band_fraction(8192, 4096)
    expected = {("window_flex", 1024, "fwd"): (1.1, True), ("window_flex", 1024, "bwd"): (2.4 / 2.5, False),
                ("window_flex", 4096, "fwd"): (4.0 / 3.9, True), ("window_flex", 4096, "bwd"): (9 / 8, True),
                ("window_band", 1024, "fwd"): (1 / (4 * f1024), True),
                ("window_band", 1024, "bwd"): (2.5 / (10 * f1024), True),
                ("window_band", 4096, "fwd"): (3.9 / (4 * f4096), False),
                ("window_band", 4096, "bwd"): (8 / (10 * f4096), True),
                ("varlen_dense", None, "fwd"): (0.95, True), ("varlen_dense", None, "bwd"): (0.85, False),
                ("softcap_plain", 30.0, "fwd"): (1.1, True), ("softcap_plain", 30.0, "bwd"): (1.2, False),
                ("softcap_flex", 30.0, "fwd"): (5 / 4.4, True), ("softcap_flex", 30.0, "bwd"): (11 / 12, False),
                ("softcap_large_plain", 30.0, "fwd"): (1.1, True), ("softcap_large_plain", 30.0, "bwd"): (1.2, False),
                ("softcap_large_flex", 30.0, "fwd"): (4 / 4.4, False),
                ("softcap_large_flex", 30.0, "bwd"): (13 / 12, True),
                ("alibi_plain", None, "fwd"): (1.05, True), ("alibi_plain", None, "bwd"): (1.1, True),
                ("alibi_flex", None, "fwd"): (5 / 4.2, True)}  # no backward: Flex's erred
    assert set(judged) == set(expected)
    for key, (ratio, met) in expected.items():
        assert judged[key]["ratio"] == pytest.approx(ratio) and judged[key]["met"] is met, key


def test_targets_hold_at_their_bounds():
    targets = variants_report.TARGETS
    assert targets["window_flex"].met(1.0) and not targets["window_flex"].met(0.999)
    assert targets["window_band"].met(1.2) and not targets["window_band"].met(1.201)
    assert targets["varlen_dense"].met(0.9) and not targets["varlen_dense"].met(0.899)
    assert targets["softcap_plain"].met(1.15) and not targets["alibi_plain"].met(1.151)


def _rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first markdown table under `## heading`, as stripped cells."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in table[2:]]


def test_the_report_renders_the_targets_and_a_table_per_variant(recorded):
    assert variants_benchmark.main(["--render", str(recorded)]) == 0
    text = (recorded / "benchmark.md").read_text()
    assert "**TFLOP/s count only the visible (query, key) pairs**" in text
    assert "hand-made test fixture" in text and "3–5 calls, as many as fit in 20 ms" in text
    assert {row[0]: row[1:] for row in _rows(text, "Targets")} == {
        "windowed: bundled ≥ 1.0× FlexAttention's speed": ["3 of 4", "bf16 D128 S8192 left 1024 bwd (0.96)"],
        "windowed: time ≤ 1.2× (dense causal time × band fraction)":
            ["3 of 4", "bf16 D128 S8192 left 4096 fwd (1.30)"],
        "varlen: TFLOP/s ≥ 0.9× the dense kernel's at equal total tokens": ["1 of 2", "bf16 D128 S8192 bwd (0.85)"],
        "softcap: time ≤ 1.15× plain causal (at most 15 % slower)": ["1 of 2", "bf16 D128 S8192 bwd (1.20)"],
        "softcap: bundled ≥ 1.0× FlexAttention's speed": ["1 of 2", "bf16 D128 S8192 bwd (0.92)"],
        "softcap, scores of std 8: time ≤ 1.15× plain causal": ["1 of 2", "bf16 D128 S8192 bwd (1.20)"],
        "softcap, scores of std 8: bundled ≥ 1.0× FlexAttention's speed": ["1 of 2", "bf16 D128 S8192 fwd (0.91)"],
        "ALiBi: time ≤ 1.15× plain causal (at most 15 % slower)": ["2 of 2", "-"],
        "ALiBi: bundled ≥ 1.0× FlexAttention's speed": ["1 of 1", "-"]}
    # dtype, D, S, left, band fraction, bundled ms, Flex ms, dense ms x fraction, the two ratios, met
    assert _rows(text, "Sliding window (left, 0), causal") == [
        ["bf16", "128", "8192", "1024", "0.235", "1.00 / 2.50", "1.10 / 2.40", "0.94 / 2.35", "1.10 / 0.96",
         "1.07 / 1.07", "yes / no"],
        ["bf16", "128", "8192", "4096", "0.750", "3.90 / 8.00", "4.00 / 9.00", "3.00 / 7.50", "1.03 / 1.12",
         "1.30 / 1.07", "no / yes"]]
    assert _rows(text, "Variable-length batches (varlen) at equal total tokens") == [
        ["bf16", "128", "8192", "16, mean 2048, max 7462", "2.40 / 6.70", "4.00 / 10.00", "261 / 234", "275 / 275",
         "0.95 / 0.85", "yes / no"]]
    assert _rows(text, "Softcap") == [["bf16", "128", "8192", "4.00 / 10.00", "4.40 / 12.00", "5.00 / 11.00",
                                       "+10.0 % / +20.0 %", "1.14 / 0.92", "yes / no"]]
    assert _rows(text, "Softcap at large logits (q × 8: scaled scores of std 8)") == [
        ["bf16", "128", "8192", "4.00 / 10.00", "4.40 / 12.00", "4.00 / 13.00", "+10.0 % / +20.0 %", "0.91 / 1.08",
         "no / no"]]
    assert _rows(text, "ALiBi") == [["bf16", "128", "8192", "4.00 / 10.00", "4.20 / 11.00", "5.00 / -",
                                     "+5.0 % / +10.0 %", "1.19 / -", "yes / yes"]]  # Flex's backward erred
    assert "* flex alibi error (bwd S=8192): RuntimeError: fake failure for the test" in text
    assert _rows(text, "bf16, D=128, causal: every implementation")[0] == ["bundled causal", "275 / 275"]
    root = ElementTree.parse(recorded / "benchmark.svg").getroot()
    assert len(root.findall(f"{SVG}polyline")) == 2 * len(NAMES) - 1  # one series per measured name x direction
    assert "window (forward / backward)" in variants_report.terminal_summary(_fake_lines())


def test_render_of_a_folder_without_results_and_the_no_gpu_exit(tmp_path, capsys):
    assert variants_benchmark.main(["--render", str(tmp_path)]) == 2
    assert "no benchmark.jsonl" in capsys.readouterr().err
    if torch.cuda.is_available():
        return
    assert variants_benchmark.main(["--quick", "--out", str(tmp_path / "run")]) == 2
    assert "variants benchmark: needs a GPU" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- the loop, on the CPU

def test_the_measuring_loop_on_the_cpu(tmp_path, monkeypatch):
    """run_variants end to end with CPU stand-ins for the device (wall-clock timing, no
    memory statistics): every bundled variant measured on the interpreter, forward and
    backward, each of its lines as the arithmetic says; FlexAttention (eager here, as
    torch's CPU build cannot take its backward) recorded as an error without stopping the
    others; the report rendered from what was written."""
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setattr(timing, "_timed_calls", wall_clock_calls)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(run, "DEVICE", "cpu")
    monkeypatch.setattr(run, "peak_bytes", lambda call: (call(), 0)[1])
    monkeypatch.setattr(run, "QUICK_POLICY", RepetitionPolicy(target_ms=1.0, min_reps=1, max_reps=1, warmup_ms=0.0,
                                                              rounds=1))
    monkeypatch.setattr(implementations, "_COMPILED_FLEX", [flex_attention])
    plan = Plan(seq_lens=(32,), head_dims=(16,), dtypes=("fp16",), windows=(8,), tokens=32, width=16)
    path = variants_benchmark.run_variants(tmp_path, plan, quick=True)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    (problem,) = plan.cells()
    lengths = variants.varlen_lengths(32, 32)
    assert [line["impl"] for line in lines] == [entry.name for entry in plan.entries(problem)] * 2
    for line in lines:
        entry = Entry(line["kernel"], line["variant"], line["param"])
        assert line["flops"] == variants.result_line(entry, problem, line["direction"], lengths)["flops"]
        if line["kernel"] == "bundled":
            assert line["status"] == "ok" and line["reps"] == 1
            assert line["tflops"] == pytest.approx(grid.tflops(line["flops"], line["median_ms"]))
        else:
            assert line["status"] == "error" and "FlexAttention" in line["reason"]
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["benchmark"]["plan"]["windows"] == [8] and env["implementation"]["flex"].endswith("compiled")
    assert "visible (query, key) pairs" in env["benchmark"]["flops"]
    text = variants_report.write_report(tmp_path)[0].read_text()
    assert "## Sliding window (left, 0), causal" in text and "4, mean 8, max" in text
