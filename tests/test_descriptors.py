"""The tensor-descriptor path of the bundled kernels, on the interpreter (which has
tl.make_tensor_descriptor from triton 3.4): streaming tiles through descriptors must
give the pointer path's results bit for bit, padding and strided layouts included,
and a launch must fall back to pointers where descriptors cannot describe a tensor."""

import sys
from dataclasses import replace

import pytest
import torch

from conformance.bundled import kernels
from conformance.bundled.kernels import blocks, launch, targets, tuning

pytestmark = pytest.mark.skipif(not targets.INTERPRETER.tensor_descriptors,
                                reason="this triton has no tl.make_tensor_descriptor")
STREAMING = ("fwd", "bwd_dkdv", "bwd_dq")


@pytest.fixture
def descriptor_tables(monkeypatch):
    """The interpreter's tables with descriptors switched on for every streaming kernel."""
    patched = {name: tuning.LaunchTable(tuple((bound, replace(config, descriptors=True))
                                              for bound, config in tuning.INTERPRETER_LAUNCH[name].rows))
               for name in STREAMING}
    monkeypatch.setattr(tuning, "INTERPRETER_LAUNCH", {**tuning.INTERPRETER_LAUNCH, **patched})


def _run(q, k, v, causal):
    inputs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = kernels.flash_attention(*inputs, causal=causal)
    grads = torch.autograd.grad(out, inputs, torch.ones_like(out))
    return (out, *grads)


@pytest.fixture
def descriptor_makers(monkeypatch):
    """The kernels whose programs made a tensor descriptor, a set that grows as they run
    (the interpreter looks blocks' helper up at each call)."""
    makers = set()
    make = blocks.make_tensor_descriptor

    def noted(*args, **kwargs):
        makers.add(_calling_kernel())
        return make(*args, **kwargs)
    monkeypatch.setattr(blocks, "make_tensor_descriptor", noted)
    return makers


def _calling_kernel() -> str:
    frame = sys._getframe(1)
    while not frame.f_code.co_name.endswith("_kernel"):
        frame = frame.f_back
    return frame.f_code.co_name


def _inputs(batch, heads, kv_heads, seq_q, seq_k, head_dim, layout):
    generator = torch.Generator().manual_seed(seq_q * 1000 + seq_k)

    def draw(h, s):
        if layout == "bshd":  # (B, S, H, D) memory: the row stride is H * D
            return torch.randn(batch, s, h, head_dim, generator=generator).transpose(1, 2).half()
        return torch.randn(batch, h, s, head_dim, generator=generator).half()
    return draw(heads, seq_q), draw(kv_heads, seq_k), draw(kv_heads, seq_k)


@pytest.mark.parametrize("shape, layout, causal", [
    ((1, 2, 1, 77, 133, 64), "bhsd", True),    # ragged tiles both ways, GQA, the causal band
    ((1, 2, 2, 130, 61, 32), "bhsd", True),    # Sq > Sk: rows with no key
    ((2, 2, 2, 64, 64, 96), "bshd", False),    # a padded head dim, a strided layout
])
def test_descriptors_give_the_pointer_paths_results_bit_for_bit(monkeypatch, descriptor_tables, descriptor_makers,
                                                                  shape, layout, causal):
    q, k, v = _inputs(*shape, layout)
    with_descriptors = _run(q, k, v, causal)
    assert descriptor_makers == {"flash_forward_kernel", "dkdv_kernel", "dq_kernel"}  # every streaming kernel
    descriptor_makers.clear()
    monkeypatch.setattr(tuning, "INTERPRETER_LAUNCH", {**tuning.INTERPRETER_LAUNCH, **{
        name: tuning.LaunchTable(tuple((bound, replace(config, descriptors=False))
                                       for bound, config in tuning.INTERPRETER_LAUNCH[name].rows))
        for name in STREAMING}})
    with_pointers = _run(q, k, v, causal)
    assert not descriptor_makers
    for name, a, b in zip(("out", "dq", "dk", "dv"), with_descriptors, with_pointers):
        assert torch.equal(a, b), name


def test_a_launch_takes_descriptors_only_where_the_table_and_the_tensors_allow(descriptor_tables):
    contiguous = torch.zeros(1, 2, 64, 64, dtype=torch.float16)
    odd_rows = torch.zeros(1, 2, 64, 72, dtype=torch.float16)[..., :68]  # row stride 72 * 2 bytes: fine
    unaligned = torch.zeros(1, 2, 64, 66, dtype=torch.float16)[..., :64]  # 132-byte rows: not 16-byte aligned
    column_strided = torch.zeros(1, 2, 64, 128, dtype=torch.float16)[..., ::2]
    kwargs = lambda *tensors: launch.launch_kwargs("fwd", 64, torch.float16, streamed=tensors)
    assert kwargs(contiguous, odd_rows)["DESCRIPTORS"] is True
    assert kwargs(contiguous, unaligned)["DESCRIPTORS"] is False
    assert kwargs(column_strided)["DESCRIPTORS"] is False
    assert "DESCRIPTORS" not in launch.launch_kwargs("bwd_preprocess", 64, torch.float16, tiles=("BLOCK_M",))


def test_the_pointer_path_is_the_default_off_hopper():
    assert not any(config.descriptors for name in STREAMING
                   for _, config in tuning.INTERPRETER_LAUNCH[name].rows)
    assert not tuning.launch_config("fwd", 128, target=targets.Target("cuda", 80, 32)).descriptors
    assert not targets.Target("cuda", 80, 32).tensor_descriptors
    assert not targets.Target("hip", "gfx942", 64).tensor_descriptors
