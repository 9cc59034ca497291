"""The bundled operator's contract beyond accuracy: argument errors, strides,
poisoning, empty sequences, determinism.  Accuracy itself is the catalog's job
(smoke tier); these run real (interpreted, on CPU) launches at tiny sizes."""

import math

import pytest
import torch

from conformance.backends import INTERPRETER, activate, cuda_profile

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

import kernels  # noqa: E402
from kernels.validation import check_device  # noqa: E402

DEVICE = PROFILE.device


def qkv(batch=1, heads=2, kv_heads=2, seq_q=40, seq_k=40, head_dim=16, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, seq_q, head_dim), (batch, kv_heads, seq_k, head_dim), (batch, kv_heads, seq_k, head_dim)]
    return [torch.randn(s, generator=gen).to(dtype=dtype, device=DEVICE) for s in shapes]


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda q, k, v: (q[0], k, v), ValueError, r"q: expected a rank-4 tensor"),
        (lambda q, k, v: (q, k.float(), v), ValueError, r"k: expected the same dtype as q"),
        (lambda q, k, v: (q, k, v.to(torch.int32)), TypeError, r"v: expected dtype in"),
        (lambda q, k, v: (q, k, v[:, :, :-1]), ValueError, r"v: expected the same shape as k"),
        (lambda q, k, v: (q, k[..., :8], v[..., :8]), ValueError, r"k: expected head_dim 16"),
        (lambda q, k, v: (q.repeat(1, 3, 1, 1)[:, :3], k, v), ValueError, r"number of kv heads \(2\) must divide"),
        (lambda q, k, v: ("q", k, v), TypeError, r"q: expected a torch.Tensor"),
    ],
)
def test_bad_arguments_are_named(mutate, error, match):
    with pytest.raises(error, match=match):
        kernels.flash_attention(*mutate(*qkv()))


def test_unsupported_head_dim_lists_supported_ones():
    q, k, v = qkv(head_dim=24)
    with pytest.raises(ValueError, match=r"head_dim 24 is not supported on backend .*supported head dims: 16, 32"):
        kernels.flash_attention(q, k, v)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -0.125])
def test_non_finite_or_non_positive_sm_scale_is_rejected(scale):
    with pytest.raises(ValueError, match="sm_scale: expected a finite positive number"):
        kernels.flash_attention(*qkv(), sm_scale=scale)


def test_cpu_tensor_on_a_gpu_backend_is_rejected():
    with pytest.raises(ValueError, match="q: tensor is on the CPU"):
        check_device("q", torch.zeros(1), cuda_profile((9, 0)))


def test_strided_inputs_are_read_in_place():
    """(B, S, H, D) memory viewed as (B, H, S, D) gives bitwise the contiguous result."""
    q, k, v = qkv(seq_q=33, seq_k=47)
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not strided[0].is_contiguous()
    expected = kernels.flash_attention(q, k, v, causal=True)
    assert torch.equal(kernels.flash_attention(*strided, causal=True), expected)


def test_every_output_element_is_written():
    q, k, v = [t.requires_grad_() for t in qkv(seq_q=70, seq_k=45, heads=4, kv_heads=2)]
    with kernels.poisoned_outputs():
        out, lse = kernels.flash_attention(q, k, v, causal=True, return_log_normalizer=True)
        grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert not out.isnan().any() and not lse.isnan().any()
    assert all(not g.isnan().any() for g in grads)
    # Sq > Sk with causal alignment: the first Sq - Sk rows see no key.
    assert torch.equal(lse[..., :25], torch.full_like(lse[..., :25], -math.inf))
    assert not out[..., :25, :].any()


def test_empty_sequences():
    q, k, v = qkv(seq_q=0)
    out, lse = kernels.flash_attention(q, k, v, return_log_normalizer=True)
    assert out.shape == q.shape and lse.shape == (1, 2, 0)
    q, k, v = qkv(seq_k=0)
    out, lse = kernels.flash_attention(q, k, v, return_log_normalizer=True)
    assert not out.any() and torch.isneginf(lse).all()


def test_forward_is_bitwise_deterministic():
    q, k, v = qkv(dtype=torch.bfloat16, seq_q=65, seq_k=65)
    first = kernels.flash_attention(q, k, v, causal=True)
    assert torch.equal(first, kernels.flash_attention(q, k, v, causal=True))


def test_interpreter_profile_documents_its_bf16_workarounds():
    assert INTERPRETER.emulate_bf16
    assert any("tl.dot on bf16" in note for note in INTERPRETER.notes)
    assert any("truncation" in note for note in INTERPRETER.notes)
