"""The benchmark without a GPU: its FLOP arithmetic, the report rendered from a recorded
(hand-made) benchmark.jsonl, the plot, the no-GPU message, and the measuring loop run on
the CPU with wall-clock timing standing in for CUDA events."""

import json
import math
import shutil
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import torch

from conformance.bundled.benchmarks import flash_benchmark, grid, implementations, report, run, svg, timing
from conformance.bundled.benchmarks.timing import RepetitionPolicy
from conformance import backends

RECORDED = Path(__file__).parent / "data" / "benchmark_run"
SVG = "{http://www.w3.org/2000/svg}"


def test_forward_flops_count_two_matmuls_of_two_flops_per_multiply_add():
    assert grid.attention_flops(1, 1, 1024, 1024, 64, False, "fwd") == 4 * 1024 * 1024 * 64
    assert grid.attention_flops(2, 3, 100, 300, 32, False, "fwd") == 4 * 2 * 3 * 100 * 300 * 32


def test_causal_halves_and_backward_is_two_and_a_half_forwards():
    forward = grid.attention_flops(2, 16, 4096, 4096, 128, False, "fwd")
    assert grid.attention_flops(2, 16, 4096, 4096, 128, True, "fwd") == forward / 2
    assert grid.attention_flops(2, 16, 4096, 4096, 128, False, "bwd") == 2.5 * forward
    assert grid.attention_flops(2, 16, 4096, 4096, 128, True, "bwd") == 1.25 * forward
    with pytest.raises(ValueError, match="direction"):
        grid.attention_flops(1, 1, 1, 1, 1, False, "both")


def test_shapes_keep_tokens_and_width_so_flops_grow_linearly_with_s():
    problem = grid.Problem.sized("bf16", 128, False, 16384)
    assert (problem.batch, problem.heads) == (2, 16)
    flops = [grid.Problem.sized("fp16", 64, False, s).flops("fwd") for s in (1024, 2048, 4096)]
    assert flops == [4.0 * 32768 * 2048 * s for s in (1024, 2048, 4096)]
    assert grid.tflops(2e12, 10.0) == pytest.approx(200.0)


def test_the_full_grid_covers_every_s_d_mask_and_dtype():
    problems = grid.problems(**grid.FULL)
    assert len(problems) == 5 * 2 * 2 * 2
    assert {p.seq_len for p in problems} == {1024, 2048, 4096, 8192, 16384}
    assert {(p.dtype, p.head_dim, p.causal) for p in problems} == {
        (dtype, d, causal) for dtype in ("fp16", "bf16") for d in (64, 128) for causal in (False, True)}
    assert [p.seq_len for p in problems[:5]] == [1024, 2048, 4096, 8192, 16384]  # a panel, S ascending


def test_repetitions_fill_the_target_within_bounds():
    policy = RepetitionPolicy(target_ms=100.0, min_reps=5, max_reps=25)
    assert [policy.reps(ms) for ms in (200.0, 10.0, 1.0, 0.0)] == [5, 10, 25, 25]


def test_math_backend_runs_only_where_its_score_matrices_fit():
    small, large = (grid.Problem.sized("bf16", 128, False, s) for s in (1024, 8192))
    free = 80 * implementations.GIB
    assert implementations.skip_reason("sdpa-math", small, "bwd", free) is None
    reason = implementations.skip_reason("sdpa-math", large, "bwd", free)
    assert reason.startswith("math backend materialises 3 B·H·S×S matrices: ~48 GiB > 50% of the 80 GiB free")
    assert implementations.skip_reason("sdpa-flash", large, "bwd", free) is None


@pytest.fixture
def recorded(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(RECORDED, run_dir)
    return run_dir


def test_recorded_lines_are_consistent_with_the_flop_arithmetic():
    _, lines = report.read_run(RECORDED)
    for line in lines:
        problem = grid.Problem(*(line[key] for key in ("dtype", "head_dim", "causal", "seq_len", "batch", "heads")))
        assert line["flops"] == problem.flops(line["direction"])
        if line["status"] == "ok":
            assert line["tflops"] == pytest.approx(grid.tflops(line["flops"], line["median_ms"]))


def test_report_tables_come_from_the_recorded_lines(recorded):
    markdown_path, plot_path = report.write_report(recorded)
    text = markdown_path.read_text()
    assert "hand-made test fixture" in text and "![TFLOP/s against sequence length" in text
    assert text.count("## bf16, D=128") == 2
    # bundled at S=1024 non-causal: recorded 150·(1 + 1/64) forward, 90·(1 + 1/64) backward
    assert "| bundled          | 152 / 91  | 159 / 96  |" in text
    assert "| sdpa-math        | 20 / -    | - / -     |" in text  # an error and a skip
    assert "* sdpa-math error (bwd S=1024): RuntimeError: fake failure for the test" in text
    assert "* sdpa-math skipped (fwd S=4096, bwd S=4096): math backend materialises" in text
    assert "5–25 calls, as many as fit in 100 ms" in text
    assert plot_path.name == "benchmark.svg"


def test_the_svg_plot_draws_one_line_per_measured_series(recorded):
    _, plot_path = report.write_report(recorded)
    root = ElementTree.parse(plot_path).getroot()
    assert root.tag == f"{SVG}svg"
    polylines = root.findall(f"{SVG}polyline")
    # 3 implementations x 2 directions per panel, plus sdpa-math at S=1024: both directions
    # non-causal, forward only causal (its causal backward errs)
    assert len(polylines) == (6 + 2) + (6 + 1)
    dashed = [line for line in polylines if line.get("stroke-dasharray")]
    assert len(dashed) == (3 + 1) + 3
    for line in polylines:  # S ascending left to right
        xs = [float(point.split(",")[0]) for point in line.get("points").split()]
        assert xs == sorted(xs)
    texts = {element.text for element in root.iter(f"{SVG}text")}
    assert {"bf16, D=128, causal", "1k", "4k", "bundled", "backward", "TFLOP/s"} <= texts


def test_nice_axis_tops():
    assert [svg.nice_ceiling(v) for v in (0, 7, 320, 480, 501, 1000)] == [1.0, 10, 500, 500, 1000, 1000]


def test_render_command_and_the_no_gpu_message(recorded, capsys):
    assert flash_benchmark.main(["--render", str(recorded)]) == 0
    assert (recorded / "benchmark.md").exists()
    assert flash_benchmark.main(["--render", str(recorded / "missing")]) == 2
    if torch.cuda.is_available():
        return
    assert flash_benchmark.main(["--quick"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


def wall_clock_calls(call, reps):
    """The benchmark's timed calls with the CPU's wall clock instead of CUDA events (also
    used by tests/test_benchmark_variants.py)."""
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


@pytest.fixture
def wall_clock(monkeypatch):
    """timing's CUDA events and synchronisation replaced by the wall clock (CPU runs)."""
    monkeypatch.setattr(timing, "_timed_calls", wall_clock_calls)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda: None)


def test_implementations_are_timed_in_interleaved_rounds(wall_clock):
    order = []

    def recorder(name):
        return lambda: order.append(name)

    def broken():
        order.append("broken")
        if order.count("broken") > 2:  # fails in its first timed round
            raise RuntimeError("lost the device")

    policy = RepetitionPolicy(target_ms=1e9, min_reps=6, max_reps=6, warmup_ms=0.0, rounds=3)
    results = timing.interleaved_medians({"a": recorder("a"), "broken": broken, "b": recorder("b")}, policy)
    assert isinstance(results["broken"], RuntimeError)
    assert [len(results[name][1]) for name in ("a", "b")] == [6, 6]
    timed = [name for name in order[6:] if name != "broken"]  # after each one's first two calls
    assert timed == ["a"] * 2 + ["b"] * 2 + ["a"] * 2 + ["b"] * 2 + ["a"] * 2 + ["b"] * 2


def test_the_measuring_loop_on_the_cpu(tmp_path, monkeypatch, wall_clock):
    """run_benchmark end to end with CPU stand-ins for the device: bundled kernel (on the
    interpreter), SDPA's CPU flash and math backends, cuDNN refusing (skipped, torch's
    reason kept), math over its memory share (skipped)."""
    monkeypatch.setattr(backends, "_active", backends._active)
    monkeypatch.setattr(run, "DEVICE", "cpu")
    monkeypatch.setattr(run, "free_bytes", lambda: 2**18)
    monkeypatch.setattr(run, "peak_bytes", lambda call: (call(), 0)[1])
    problems = [grid.Problem("fp16", 16, True, 64, 1, 1), grid.Problem("fp16", 16, False, 192, 1, 1)]
    names = ["bundled", "sdpa-flash", "sdpa-cudnn", "sdpa-math"]
    path = run.run_benchmark(tmp_path, problems, names, quick=True)
    lines = [json.loads(text) for text in path.read_text().splitlines()]
    assert len(lines) == len(problems) * len(names) * 2
    by_key = {(line["impl"], line["seq_len"], line["direction"]): line for line in lines}
    for direction in ("fwd", "bwd"):
        measured = by_key[("bundled", 64, direction)]
        assert measured["status"] == "ok" and measured["reps"] == 3 and math.isfinite(measured["tflops"])
        assert measured["tflops"] == pytest.approx(grid.tflops(measured["flops"], measured["median_ms"]))
        assert by_key[("sdpa-flash", 192, direction)]["status"] == "ok"
        cudnn = by_key[("sdpa-cudnn", 64, direction)]
        assert cudnn["status"] == "skipped" and "RuntimeError: No" in cudnn["reason"]
        assert by_key[("sdpa-math", 64, direction)]["status"] == "ok"  # 3·64²·4 bytes fit in 128 KiB
        assert by_key[("sdpa-math", 192, direction)]["reason"].startswith("math backend materialises")
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["benchmark"]["grid"] == "quick" and env["backend"] == "interpreter:cpu"
    written = report.write_report(tmp_path)
    assert "## fp16, D=16, causal" in written[0].read_text()


def test_the_report_states_the_bundled_kernels_speed_relative_to_each_peer():
    def line(impl, direction, tflops, seq_len=4096):
        return {"impl": impl, "direction": direction, "seq_len": seq_len, "status": "ok", "tflops": tflops}

    lines = [line("bundled", "fwd", 300.0), line("bundled", "bwd", 200.0), line("flex", "fwd", 400.0),
             line("flex", "bwd", 100.0), line("sdpa-flash", "fwd", 150.0)]
    headers, rows = report.ratio_rows(lines)
    assert headers == ["ratio", "S=4096"]
    assert rows == [["bundled / sdpa-flash", "2.00 / -"], ["bundled / flex", "0.75 / 2.00"]]  # no cuDNN line


def test_the_report_shows_the_harness_throughput_of_a_conformance_run(recorded, tmp_path):
    run_dir = tmp_path / "standard"
    run_dir.mkdir()
    (run_dir / "env.json").write_text(json.dumps({"tier": "standard", "harness": "abc1234", "device": "GPU X"}))
    probe = {"case": "probe.dot[fp16]", "kind": "probe", "duration_s": 1.0}
    cases = [{"case": f"flash_attention.fwd[{i}]", "duration_s": 0.5} for i in range(6)]
    (run_dir / "results.jsonl").write_text("\n".join(json.dumps(line) for line in [probe, *cases]) + "\n")
    (run_dir / "run.log").write_text("...\n======== 6 passed in 4.00s ========\n")
    assert flash_benchmark.main(["--render", str(recorded), "--harness-run", str(run_dir)]) == 0
    text = (recorded / report.MARKDOWN_FILE).read_text()
    assert "## Harness throughput" in text
    assert "6 cases, 4 s of wall time, 3 s of case time; 1.5 cases per second (by wall time)" in text
    assert flash_benchmark.main(["--render", str(recorded)]) == 0  # kept on a later render
    assert "## Harness throughput" in (recorded / report.MARKDOWN_FILE).read_text()
    assert flash_benchmark.main(["--render", str(recorded), "--harness-run", str(tmp_path / "missing")]) == 2
