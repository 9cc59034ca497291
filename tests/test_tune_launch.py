"""benchmarks/tune_launch.py: every row of a sweep is timed with the configuration it names,
whatever table the problem would otherwise take (on the interpreter, CPU)."""

import dataclasses
import json

import pytest
import torch

from conformance.bundled.benchmarks import tune_launch
from conformance.bundled.kernels import tuning
from conformance.bundled.kernels.targets import INTERPRETER
from conformance.bundled.kernels.problem import NARROW_BAND_KEYS, launch_variant

SWEPT = tuning.LaunchConfig(16, 32, num_warps=4, num_stages=1)
# What the problem's own variant table would give: a sweep that replaced only the kernel's
# general table timed this for every row.
VARIANT_TABLE = tuning.LaunchConfig(32, 16, num_warps=4, num_stages=1)
SHAPES = [tune_launch.Shape(16, 64, causal, tokens=128) for causal in (False, True)] + [
    tune_launch.Shape(16, 64, True, window=16, tokens=128), tune_launch.Shape(16, 64, True, varlen=True, tokens=128)]


@pytest.fixture
def variant_tables(monkeypatch):
    """The interpreter's tables with a window and a varlen table of their own for each kernel."""
    tables = dict(tuning.launch_tables(INTERPRETER))
    for kernel in ("fwd", "bwd_dkdv", "bwd_dq"):
        for variant in ("window", "varlen"):
            tables[f"{kernel}.{variant}"] = tuning.table((256, VARIANT_TABLE))
    monkeypatch.setattr(tuning, "INTERPRETER_LAUNCH", tables)


def _inputs(shape):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape.batch, 2, shape.seq_len, shape.head_dim, generator=generator) for _ in range(3)]


@pytest.mark.parametrize("kernel", ["fwd", "bwd_dkdv", "bwd_dq"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "varlen" if shape.varlen else
                         f"window{shape.window}" if shape.window else f"causal{shape.causal}")
def test_each_kernel_launches_with_the_swept_configuration(variant_tables, kernel, shape):
    timed = tune_launch._timed(kernel, shape, *_inputs(shape))
    with tune_launch.judged(kernel, SWEPT), tuning.recorded_launches() as launched:
        timed()
    assert launched[kernel] == SWEPT
    if shape.window or shape.varlen:  # the variant table is still what the others take
        assert all(config == VARIANT_TABLE for name, config in launched.items()
                   if name in ("fwd", "bwd_dkdv", "bwd_dq") and name != kernel)


def test_a_row_whose_kernel_launched_otherwise_or_not_at_all_is_an_error(variant_tables):
    shape = SHAPES[-1]
    forward = tune_launch._timed("fwd", shape, *_inputs(shape))
    with pytest.raises(RuntimeError, match="bwd_dq never launched"):
        with tune_launch.judged("bwd_dq", SWEPT):
            forward()
    with pytest.raises(RuntimeError, match="swept with .* but launched with"):
        with tune_launch.judged("fwd", SWEPT):
            tuning.record_launch("fwd", dataclasses.replace(SWEPT, num_stages=2))  # as a refused config would


def test_a_shape_counts_its_tokens_pairs():
    assert tune_launch.Shape(16, 64, True, tokens=128).pairs() == 2 * 64 * 65 // 2
    varlen = tune_launch.Shape(16, 64, True, varlen=True, tokens=128)
    lengths = tune_launch.varlen_lengths(64, 128)
    assert sum(lengths) == 128 and varlen.pairs() == sum(n * (n + 1) // 2 for n in lengths)


def test_a_sweep_writes_its_environment_beside_its_lines(tmp_path):
    env = json.loads(tune_launch.write_environment(tmp_path / "fwd-bf16.jsonl").read_text())
    assert (tmp_path / "fwd-bf16.env.json").exists()
    assert env["triton"] and env["torch"] and env["harness"]["revision"] and env["command"]


def _row(block_m, tflops, table=False, error=""):
    return {"block_m": block_m, "block_n": 64, "num_warps": 4, "num_stages": 2, "tflops": tflops, "error": error,
            "table": table}


def test_a_sweep_reads_against_the_current_tables_row():
    rows = [_row(16, 300.0), _row(32, 330.0), _row(64, 200.0, table=True), _row(128, None, error="OutOfResources: x")]
    lines = tune_launch.ranking("fwd D=64", rows, shown=2)
    assert lines[0] == "fwd D=64"
    assert "330.0 TFLOP/s   1.65x table" in lines[1] and "300.0 TFLOP/s   1.50x table" in lines[2]
    assert lines[3].endswith("200.0 TFLOP/s   1.00x table  <- table")  # outside the shown rows, still shown
    assert lines[4].startswith("  m128") and "OutOfResources" in lines[4] and len(lines) == 5


def test_a_sweep_says_when_the_tables_row_is_missing_or_failed():
    assert tune_launch.ranking("t", [_row(16, 300.0)])[-1] == "  (the current table's row is not in this grid)"
    lines = tune_launch.ranking("t", [_row(16, 300.0), _row(64, None, table=True, error="RuntimeError: y")])
    assert lines[1].endswith("300.0 TFLOP/s") and "failed: RuntimeError: y" in lines[2] and len(lines) == 3


def test_a_shape_reads_the_variant_table_the_kernels_would():
    assert [shape.table_variant for shape in SHAPES] == [None, None, "window", "varlen"]
    wide = tune_launch.Shape(16, 8192, True, window=NARROW_BAND_KEYS)  # left + 1 keys: one past narrow
    assert wide.table_variant is None


@pytest.mark.parametrize("band, varlen, variant", [
    ((NARROW_BAND_KEYS - 1, 0), False, "window"), ((0, NARROW_BAND_KEYS - 1), True, "window"),
    ((NARROW_BAND_KEYS, 0), False, None), ((NARROW_BAND_KEYS, 0), True, "varlen"),
    ((700, 900), False, None), (None, True, "varlen"), (None, False, None),
])
def test_only_a_narrow_band_takes_the_window_tables(band, varlen, variant):
    """A band of at most NARROW_BAND_KEYS keys a row (left + right + 1) runs the "window"
    rows; a wider one the kernel's own (or the packed batch's)."""
    assert launch_variant(band, varlen) == variant


def test_main_marks_the_tables_row_in_its_lines_and_ranking(monkeypatch, tmp_path, capsys):
    """The command's plumbing with the timing stubbed (it needs a GPU): one JSON line per row, the
    current table's row flagged, the environment beside the lines, a ranking per problem."""
    table_row = tuning.launch_config("fwd", 64, "fp16", target=INTERPRETER, variant="varlen")
    monkeypatch.setattr(tune_launch.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_launch.tuning, "launch_config",
                        lambda kernel, head_dim, dtype, variant=None: table_row)
    monkeypatch.setattr(tune_launch, "measure", lambda kernel, config, shape, dtype: float(config.block_m))
    out = tmp_path / "fwd.jsonl"
    grid = ["--block-m", f"32,{table_row.block_m}", "--block-n", str(table_row.block_n), "--warps",
            str(table_row.num_warps), "--stages", str(table_row.num_stages)]
    assert tune_launch.main(["--varlen", "--head-dims", "64", "--out", str(out), *grid]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["table"] for line in lines] == [False, True] and (tmp_path / "fwd.env.json").exists()
    assert "<- table" in capsys.readouterr().out
