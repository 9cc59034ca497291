"""Tiles loaded without masks, on the interpreter: a head dim that fills its tile is
launched with no column bound (kernels.launch.head_dim_bound -> None) and the off-band
loops pass no row bound, so those loads are compiled without masks (blocks.below).
Leaving a mask out must change no value: every operator's outputs and gradients are
compared bit for bit with launches that keep the head-dim masks."""

import pytest
import torch

from conformance.bundled import kernels
from conformance.bundled.kernels import flash, launch, piecewise


def test_only_a_head_dim_that_fills_its_tile_goes_unmasked():
    assert launch.head_dim_bound(64, 64) is None
    assert launch.head_dim_bound(96, 128) == 96
    assert launch.head_dim_bound(16, 32) == 16  # fp8 pads d16 to 32


def _draw(generator, batch, heads, seq, head_dim, dtype):
    return torch.randn(batch, heads, seq, head_dim, generator=generator).to(dtype)


def _flash(q, k, v, causal):
    inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse, total = kernels.flash_attention(*inputs, causal=causal, return_log_normalizer=True,
                                              return_total_attention=True)
    return (out, lse, total, *torch.autograd.grad(out, inputs, torch.ones_like(out)))


def _piecewise(q1, k1, q2, k2, v, causal):
    inputs = [t.detach().clone().requires_grad_() for t in (q1, k1, q2, k2, v)]
    out = kernels.piecewise_attention(*inputs, dist_threshold=20, causal=causal)
    return (out, *torch.autograd.grad(out, inputs, torch.ones_like(out)))


# Ragged tiles both ways (masked tails next to unmasked off-band tiles), GQA, Sq > Sk.
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("seq_q, seq_k, causal", [(77, 133, True), (130, 61, True), (128, 192, False)])
def test_unmasked_loads_change_no_value(monkeypatch, dtype, seq_q, seq_k, causal):
    generator = torch.Generator().manual_seed(seq_q * 1000 + seq_k)
    q = _draw(generator, 1, 2, seq_q, 64, dtype)
    k, v = (_draw(generator, 1, 1, seq_k, 64, dtype) for _ in range(2))
    q2, k2 = _draw(generator, 1, 2, seq_q, 64, dtype), _draw(generator, 1, 1, seq_k, 64, dtype)
    unmasked = _flash(q, k, v, causal), _piecewise(q, k, q2, k2, v, causal)
    for module in (flash, piecewise):  # every launch keeps its head-dim masks
        monkeypatch.setattr(module, "head_dim_bound", lambda head_dim, block_d, launch=None: head_dim)
    masked = _flash(q, k, v, causal), _piecewise(q, k, q2, k2, v, causal)
    names = (("out", "lse", "total", "dq", "dk", "dv"), ("out", "dq1", "dk1", "dq2", "dk2", "dv"))
    for op_names, op_unmasked, op_masked in zip(names, unmasked, masked):
        for name, a, b in zip(op_names, op_unmasked, op_masked):
            assert torch.equal(a, b), name
