"""benchmarks/tune_launch.py: every row of a sweep is timed with the configuration it names,
whatever table the problem would otherwise take (on the interpreter, CPU)."""

import dataclasses
import json

import pytest
import torch

from conformance.bundled.benchmarks import tune_launch
from conformance.bundled.kernels import tuning
from conformance.bundled.kernels.targets import INTERPRETER
from conformance.bundled.kernels.problem import AttentionProblem
from conformance.bundled.kernels.tables_nvidia import HOPPER_LAUNCH, HOPPER_NARROW_BAND_KEYS
from conformance.bundled.kernels.targets import Target

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


HOPPER_TARGET = Target("cuda", 90, 32)


def _problem(band, varlen) -> AttentionProblem:
    """An sm_90 call's problem as far as its launch tables go: a band and a packed batch or not."""
    offsets = torch.tensor([0, 64], dtype=torch.int32) if varlen else None
    return AttentionProblem(1, 2, 2, 64, 64, 64, False, 0.125, None, band=band, cu_seqlens_q=offsets,
                            cu_seqlens_k=offsets)


NARROW, WIDE = HOPPER_NARROW_BAND_KEYS - 1, HOPPER_NARROW_BAND_KEYS  # left + 1 keys a row: the widest narrow band, one more


@pytest.mark.parametrize("band, varlen, tables", [
    ((NARROW, 0), False, ("fwd.window", "bwd_dq.window", "bwd_dkdv")),
    ((0, NARROW), True, ("fwd.window", "bwd_dq.window", "bwd_dkdv")),
    ((WIDE, 0), False, ("fwd", "bwd_dq", "bwd_dkdv")),
    ((WIDE, 0), True, ("fwd.varlen", "bwd_dq", "bwd_dkdv")),
    ((700, 900), False, ("fwd", "bwd_dq", "bwd_dkdv")),
    (None, True, ("fwd.varlen", "bwd_dq", "bwd_dkdv")),
    (None, False, ("fwd", "bwd_dq", "bwd_dkdv")),
])
def test_only_a_narrow_band_takes_the_window_tables(band, varlen, tables):
    """On sm_90 a band of at most HOPPER_NARROW_BAND_KEYS keys a row (left + right + 1) runs
    the "window" rows of the forward and dQ (before a packed batch's); a wider one the
    kernel's own or the packed batch's.  The dK/dV kernel has neither."""
    choice = _problem(band, varlen).table_choice()
    for kernel, table in zip(("fwd", "bwd_dq", "bwd_dkdv"), tables):
        assert tuning.launch_config(kernel, 64, "fp16", HOPPER_TARGET, **choice) == HOPPER_LAUNCH[table].pick(64), kernel


def test_the_window_tables_are_hoppers_narrow_band_tables():
    """The bound is the table set's: the Hopper window tables carry it, and a target whose
    set has no window table (sm_80) takes the kernel's own rows for every band."""
    assert {name: tab.widest_band for name, tab in HOPPER_LAUNCH.items() if name.endswith(".window")} == {
        "fwd.window": HOPPER_NARROW_BAND_KEYS, "bwd_dq.window": HOPPER_NARROW_BAND_KEYS}
    ampere = Target("cuda", 80, 32)
    narrow = _problem((15, 0), False).table_choice()
    assert tuning.launch_config("fwd", 64, "fp16", ampere, **narrow) == tuning.launch_config("fwd", 64, "fp16", ampere)
    assert not tuning.table((64, SWEPT), widest_band=16).serves_band(None)  # no band: not a band's table
    assert tuning.table((64, SWEPT)).serves_band(None) and tuning.table((64, SWEPT)).serves_band(10**6)


def test_a_shape_reads_the_tables_the_kernels_would():
    """tune_launch's Shape names its tables as the kernels' problem does (a causal window
    (left, 0): left + 1 keys a row), so a sweep's `table` row is the one the kernels launch."""
    for shape in SHAPES + [tune_launch.Shape(16, 8192, True, window=HOPPER_NARROW_BAND_KEYS)]:
        band = (shape.window, 0) if shape.window else None
        assert shape.table_choice() == _problem(band, shape.varlen).table_choice(), shape
    wide = tune_launch.Shape(64, 8192, True, window=HOPPER_NARROW_BAND_KEYS)  # left + 1 keys: one past narrow
    narrow = tune_launch.Shape(64, 8192, True, window=HOPPER_NARROW_BAND_KEYS - 1)
    assert tuning.launch_config("fwd", 64, "bf16", HOPPER_TARGET, **wide.table_choice()) == HOPPER_LAUNCH["fwd"].pick(64)
    assert tuning.launch_config("fwd", 64, "bf16", HOPPER_TARGET, **narrow.table_choice()) == \
        HOPPER_LAUNCH["fwd.window"].pick(64)


def test_main_marks_the_tables_row_in_its_lines_and_ranking(monkeypatch, tmp_path, capsys):
    """The command's plumbing with the timing stubbed (it needs a GPU): one JSON line per row, the
    current table's row flagged, the environment beside the lines, a ranking per problem."""
    table_row = tuning.launch_config("fwd", 64, "fp16", target=INTERPRETER, variants="varlen")
    monkeypatch.setattr(tune_launch.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_launch.tuning, "launch_config",
                        lambda kernel, head_dim, dtype, variants=(), band_keys=None: table_row)
    monkeypatch.setattr(tune_launch, "measure", lambda kernel, config, shape, dtype: float(config.block_m))
    out = tmp_path / "fwd.jsonl"
    grid = ["--block-m", f"32,{table_row.block_m}", "--block-n", str(table_row.block_n), "--warps",
            str(table_row.num_warps), "--stages", str(table_row.num_stages)]
    assert tune_launch.main(["--varlen", "--head-dims", "64", "--out", str(out), *grid]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["table"] for line in lines] == [False, True] and (tmp_path / "fwd.env.json").exists()
    assert "<- table" in capsys.readouterr().out
