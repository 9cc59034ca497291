"""benchmarks/tune_launch.py: every row of a sweep is timed with the configuration it names,
whatever table the problem would otherwise take (on the interpreter, CPU)."""

import dataclasses
import json

import pytest
import torch

from conformance.bundled.benchmarks import tune_launch
from conformance.bundled.kernels import tuning
from conformance.bundled.kernels.targets import INTERPRETER

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
