"""The KV-cache decoding benchmark without a GPU: its grid, what it skips and why, its command
line, and the report (tables, goals, plot) rendered from recorded lines."""

import json

import pytest

from conformance.bundled.benchmarks import decode, decode_benchmark


def _line(impl, bandwidth=None, batch=8, context=32768, page_size=16, **extra):
    cell = decode.Cell("bf16", page_size, 1, batch, context)
    line = {"impl": impl, **cell.__dict__, "cache_bytes": cell.cache_bytes, **extra}
    if bandwidth is not None:
        line.update(ms=cell.cache_bytes / bandwidth * 1e3, bandwidth=bandwidth, samples=40)
    return line


def test_a_cell_counts_the_k_and_v_bytes_of_every_context():
    cell = decode.Cell("fp16", 16, 4, 8, 4096)
    assert cell.cache_bytes == 2 * 8 * 4096 * 8 * 128 * 2
    assert len(decode.cells(**decode.FULL)) == 2 * 2 * 2 * 4 * 5


def test_skips_say_why():
    cell = decode.Cell("bf16", 16, 4, 128, 131072)
    assert "the paged cache needs" in decode.skip_reason(cell, "cache", free_bytes=10 << 30)
    assert decode.skip_reason(cell, "bundled", free_bytes=10 << 30) is None  # reads the paged cache
    assert "a copy of the cache needs" in decode.skip_reason(cell, "flex", free_bytes=10 << 30)
    assert decode.skip_reason(cell, "flex", free_bytes=10 << 30, has_copy=True) is None
    assert decode.skip_reason(cell, "flag_paged", free_bytes=1 << 40) == "paged_attention takes one token per sequence"
    small = decode.Cell("bf16", 16, 1, 1, 1024)
    assert decode.skip_reason(small, "flex", free_bytes=2 << 30) is None


def test_the_command_line_refuses_an_unknown_implementation(capsys):
    with pytest.raises(SystemExit):
        decode_benchmark.parse_args(["--impls", "bundled,vllm"])
    assert "unknown implementation 'vllm'" in capsys.readouterr().err


def test_without_a_gpu_nothing_is_measured(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert decode_benchmark.main(["--quick", "--out", str(tmp_path / "run")]) == decode_benchmark.EXIT_NO_GPU
    assert decode_benchmark.main(["--render", str(tmp_path)]) == decode_benchmark.EXIT_USAGE


def test_the_report_checks_the_goals_cell_by_cell(tmp_path):
    copy = 3.0e12
    lines = [_line("bundled", 2.6e12), _line("flag_paged", 2.0e12), _line("flex", 2.9e12),
             _line("bundled", 1.0e12, context=1024), _line("flag_split_kv", skip="needs 9.0 GiB of 4.0 GiB free")]
    (tmp_path / "env.json").write_text(json.dumps({"device": "a GPU", "benchmark": {"copy_bandwidth": [copy, 2.9e12]}}))
    (tmp_path / decode_benchmark.BENCHMARK_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert decode_benchmark.main(["--render", str(tmp_path)]) == 0
    text = (tmp_path / decode_benchmark.MARKDOWN_FILE).read_text()
    # one cell reads more than 256 MB (B8, 32k keys: 1 GiB), at 87 % of the copy bandwidth
    assert "- bundled >= 80% of the copy bandwidth where the cache read exceeds 256 MB: 1 of 1 cells" in text
    assert "- bundled >= 1.0x flag_paged: 1 of 1 cells (ratio 1.30-1.30)" in text
    assert "- bundled >= 1.0x flex: 0 of 1 cells (ratio 0.90-0.90)" in text
    assert "- bundled >= 1.0x flag_split_kv: not measured" in text
    assert "2600 (87%)" in text and "needs 9.0 GiB" in text
    assert (tmp_path / decode_benchmark.PLOT_FILE).read_text().startswith("<svg")


def test_dense_peers_are_measured_once_and_compared_at_every_page_size(tmp_path):
    names = list(decode.IMPLEMENTATIONS)
    assert decode.measured_on(decode.Cell("bf16", 16, 1, 8, 4096), names, 16) == names
    assert decode.measured_on(decode.Cell("bf16", 64, 1, 8, 4096), names, 16) == ["bundled", "bundled_unchecked",
                                                                                   "flag_paged"]
    lines = [_line("bundled", 2.6e12), _line("bundled", 2.0e12, page_size=64), _line("flex", 2.5e12)]
    (tmp_path / "env.json").write_text(json.dumps({"device": "a GPU", "benchmark": {"copy_bandwidth": [3.0e12]}}))
    (tmp_path / decode_benchmark.BENCHMARK_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert decode_benchmark.main(["--render", str(tmp_path)]) == 0
    text = (tmp_path / decode_benchmark.MARKDOWN_FILE).read_text()
    assert "- bundled >= 1.0x flex: 1 of 2 cells (ratio 0.80-1.04)" in text
    assert "## bf16, pages of 64, Sq 1" in text and text.count("2500 (83%)") == 2  # flex in both panels
    assert decode_benchmark._measured(tmp_path) == {("bf16 page16 Sq1 B8 ctx32768", "bundled"),
                                                     ("bf16 page64 Sq1 B8 ctx32768", "bundled"),
                                                     ("bf16 page16 Sq1 B8 ctx32768", "flex")}


def test_a_crash_is_recorded_against_the_implementation_that_crashes_and_the_grid_goes_on(tmp_path, monkeypatch):
    """The supervisor with a stand-in child: the grid's child dies in the second cell; measured
    alone there, flex dies and bundled does not; the grid then resumes and finishes."""
    import argparse
    import subprocess
    from dataclasses import asdict

    cell_list = decode.cells(dtypes=("bf16",), page_sizes=(16,), seq_qs=(1,), batches=(8,), contexts=(1024, 4096, 16384))
    path = tmp_path / decode_benchmark.BENCHMARK_FILE
    calls = []

    def write(cell, name):
        with open(path, "a") as results:
            results.write(json.dumps({"impl": name, **asdict(cell), "cache_bytes": cell.cache_bytes, "bandwidth": 1e12}) + "\n")

    def child(args, out, names, budget_s=None):
        calls.append((args.only, tuple(names)))
        if args.only:  # one implementation alone on the crashing cell
            if names == ["flex"]:
                return subprocess.CompletedProcess([], 1, stderr="torch.AcceleratorError: CUDA error: an illegal memory access\n")
            write(cell_list[1], names[0])
            return subprocess.CompletedProcess([], 0, stderr="")
        done = {label for label, _ in decode_benchmark._measured(out)}
        for index, cell in enumerate(cell_list):
            if cell.label in done:
                continue
            if index == 1 and len(calls) == 1:
                return subprocess.CompletedProcess([], 1, stderr="RuntimeError: CUDA error\n")
            for name in names:
                write(cell, name)
        return subprocess.CompletedProcess([], 0, stderr="")

    monkeypatch.setattr(decode_benchmark, "_worker", child)
    args = argparse.Namespace(budget=None, only=None, quick=False, flag_attention=None)
    decode_benchmark.supervise(args, tmp_path, cell_list, ["bundled", "flex"])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["context"], line["impl"], "error" in line) for line in lines] == [
        (1024, "bundled", False), (1024, "flex", False), (4096, "bundled", False), (4096, "flex", True),
        (16384, "bundled", False), (16384, "flex", False)]
    assert "illegal memory access" in lines[3]["error"]
    assert calls[1:3] == [(cell_list[1].label, ("bundled",)), (cell_list[1].label, ("flex",))]


def test_env_json_names_the_supervising_command_not_its_child_s(tmp_path, monkeypatch):
    (tmp_path / "env.json").write_text(json.dumps({"command": "decode_benchmark.py --worker --budget -18"}))
    monkeypatch.setattr("sys.argv", ["benchmarks/decode_benchmark.py", "--budget", "270"])
    decode_benchmark._record_command(tmp_path)
    assert json.loads((tmp_path / "env.json").read_text())["command"].endswith("decode_benchmark.py --budget 270")


def test_small_caches_are_read_as_copies_in_turn_so_reads_come_from_hbm_not_l2():
    small, large = decode.Cell("bf16", 16, 1, 1, 1024), decode.Cell("bf16", 16, 1, 8, 32768)
    assert decode.copies_for(small) == decode.MAX_COPIES  # 4 MiB: 64 copies, 256 MiB in all
    assert decode.copies_for(decode.Cell("bf16", 16, 1, 1, 4096)) * 16 << 20 == decode.ROTATION_BYTES
    assert decode.copies_for(large) == 1
    # the copies count against the memory a cell needs
    assert "the paged cache needs" in decode.skip_reason(small, "cache", free_bytes=1 << 30)


def test_a_graphed_run_skips_the_checked_call_and_says_why():
    cell = decode.Cell("bf16", 16, 1, 8, 4096)
    assert "CUDA graph capture refuses" in decode.skip_reason(cell, "bundled", 1 << 40, timing_mode="graph")
    assert decode.skip_reason(cell, "bundled_unchecked", 1 << 40, timing_mode="graph") is None
    assert decode.skip_reason(cell, "bundled", 1 << 40, timing_mode="eager") is None


def test_the_report_names_its_timing_and_a_run_folder_keeps_one(tmp_path):
    lines = [_line("bundled_unchecked", 2.6e12, timing="graph")]
    env = {"device": "a GPU", "benchmark": {"copy_bandwidth": [3.0e12], "timing_mode": "graph"}}
    (tmp_path / "env.json").write_text(json.dumps(env))
    (tmp_path / decode_benchmark.BENCHMARK_FILE).write_text(json.dumps(lines[0]) + "\n")
    assert decode_benchmark.main(["--render", str(tmp_path)]) == 0
    assert "Timing: graph -- each implementation's calls replayed from a CUDA graph" in (
        tmp_path / decode_benchmark.MARKDOWN_FILE).read_text()
    with pytest.raises(SystemExit, match="timed 'graph'; --timing eager needs another --out"):
        decode_benchmark.run_decode(tmp_path, [], [], quick=True, timing_mode="eager")
    assert decode_benchmark.parse_args([]).timing == "graph"


def test_the_contiguous_call_is_held_to_the_dense_peers_at_every_page_size(tmp_path):
    assert decode.measured_on(decode.Cell("bf16", 64, 1, 8, 4096), ["bundled_contiguous", "flex"], 16) == []
    lines = [_line("bundled_contiguous", 2.8e12), _line("flex", 2.5e12), _line("flag_paged", 2.0e12),
             _line("bundled_unchecked", 2.4e12, page_size=64)]
    (tmp_path / "env.json").write_text(json.dumps({"device": "a GPU", "benchmark": {"copy_bandwidth": [3.0e12]}}))
    (tmp_path / decode_benchmark.BENCHMARK_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert decode_benchmark.main(["--render", str(tmp_path)]) == 0
    text = (tmp_path / decode_benchmark.MARKDOWN_FILE).read_text()
    assert "- bundled_contiguous >= 1.0x flex: 1 of 1 cells (ratio 1.12-1.12)" in text
    assert "bundled_contiguous >= 1.0x flag_paged" not in text  # paged peers judge the paged calls
    assert "- bundled_unchecked >= 1.0x flex: 0 of 1 cells (ratio 0.96-0.96)" in text
    assert "## bf16, pages of 64, Sq 1" in text and text.count("2800 (93%)") == 2  # shown beside both page sizes


def test_a_profile_counts_each_kernel_s_launches_per_call_and_its_median_time():
    """benchmarks.timing.kernel_summary, as decode_probe.py --profile reports a decode step: a
    split kernel and a merge per call, over 2 calls."""
    from conformance.bundled.benchmarks import timing

    kernels = [("decode_split_kernel", 8.0), ("decode_merge_kernel", 2.0),
               ("decode_split_kernel", 9.0), ("decode_merge_kernel", 3.0), ("decode_merge_kernel", 2.5)]
    assert timing.kernel_summary(kernels, calls=2) == {"decode_split_kernel": (1.0, 8.5),
                                                       "decode_merge_kernel": (1.5, 2.5)}
    assert timing.kernel_summary([], calls=3) == {}


def test_a_timing_result_becomes_a_line_s_fields_per_call():
    """decode.timed_fields, which the benchmark and the probe both write: a graph sample of 4
    calls is divided by 4; an implementation's exception becomes its error."""
    cell = decode.Cell("bf16", 16, 1, 1, 1024)
    fields = decode.timed_fields(cell, (0.04, [0.03, 0.04, 0.05]), per_sample=4)
    assert fields == {"ms": 0.01, "samples": 3, "bandwidth": cell.cache_bytes / 1e-5}
    assert decode.timed_fields(cell, RuntimeError("no"), per_sample=4) == {"error": "RuntimeError: no"}


def test_the_probe_runs_each_cell_in_a_process_of_its_own_and_records_one_that_dies(tmp_path):
    """decode_probe's supervisor with a stand-in child: three cells, three children, each named
    one cell with the same options; the second dies of a CUDA error, which its cell's line in
    --out says, and the third still runs."""
    import argparse
    import subprocess

    from conformance.bundled.benchmarks import decode_probe

    cells = [decode_probe.parse_cell(text) for text in ("bf16:16:1:1:1024", "bf16:64:4:8:4096", "fp16:16:1:1:1024:64")]
    assert [decode_probe.parse_cell(decode_probe.cell_text(cell)) for cell in cells] == cells
    out = tmp_path / "probe.jsonl"
    args = argparse.Namespace(splits="0,8", peers="flex", timing="graph", configs="128x4x2", profile=True, out=out)
    children = []

    def child(arguments):
        children.append(arguments)
        if len(children) == 2:
            return subprocess.CompletedProcess([], 1, stderr="Traceback (most recent call last):\n"
                                               "torch.AcceleratorError: CUDA error: an illegal memory access\n")
        return subprocess.CompletedProcess([], 0, stderr="")

    assert decode_probe.supervise(args, cells, run=child) == 0
    assert [arguments[arguments.index("--cells") + 1] for arguments in children] == [
        "bf16:16:1:1:1024:128", "bf16:64:4:8:4096:128", "fp16:16:1:1:1024:64"]
    assert all(arguments[:6] == ["--splits", "0,8", "--peers", "flex", "--timing", "graph"]
               and arguments[-5:] == ["--configs", "128x4x2", "--profile", "--out", str(out)] for arguments in children)
    (line,) = [json.loads(text) for text in out.read_text().splitlines()]
    assert line["cell"] == cells[1].label
    assert line["error"] == "the probing process died (exit 1): torch.AcceleratorError: CUDA error: an illegal memory access"
