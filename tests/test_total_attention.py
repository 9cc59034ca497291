"""return_total_attention: total[b, h, j] = sum_i P_ij of the normalised, un-dropped
weights, judged against the chunked reference by the 2x rule; the return conventions
of flash_attention's extra outputs; degenerate shapes."""

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.judging.rule import compare_tensor  # noqa: E402
from kernel_checks import DTYPE_NAMES, make_qkv  # noqa: E402
from conformance.bundled.reference import MATCHED, REFERENCE, attention_forward  # noqa: E402


def judge_total(q, k, v, causal):
    _, _, total = kernels.flash_attention(q, k, v, causal=causal, return_log_normalizer=True,
                                          return_total_attention=True)
    ref = attention_forward(q, k, v, causal=causal, return_total=True)[2]
    matched = attention_forward(q, k, v, causal=causal, precision=MATCHED, return_total=True)[2]
    assert total.dtype == torch.float32 and matched.dtype == torch.float32 and ref.dtype == torch.float64
    return compare_tensor("total", total, matched, ref, "fp32")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads,seq_q,seq_k", [(4, 2, 150, 70), (2, 1, 70, 150), (2, 2, 64, 64)])
def test_total_attention_matches_reference(dtype, causal, heads, kv_heads, seq_q, seq_k):
    q, k, v, _ = make_qkv(2, heads, kv_heads, seq_q, seq_k, 32, dtype, seed=seq_q * 3 + causal)
    record = judge_total(q, k, v, causal)
    assert record["passed"] and not record["nonfinite"], record


def test_columns_add_up_to_the_rows_that_see_a_key():
    """Each row's weights sum to 1, or to 0 for rows that see no key (Sq > Sk, causal)."""
    q, k, v, _ = make_qkv(1, 2, 2, 90, 40, 16, torch.float32, seed=1)
    _, total = kernels.flash_attention(q, k, v, causal=True, return_total_attention=True)
    assert total.shape == (1, 2, 40)
    assert torch.allclose(total.sum(-1), torch.full((1, 2), 40.0), rtol=1e-5)
    # Bottom-right causal: key j is seen by rows i >= j + 50, so the last key by one row only.
    assert (total[..., -1] <= 1.0 + 1e-6).all() and (total > 0).all()


def test_return_conventions():
    q, k, v, _ = make_qkv(1, 2, 2, 20, 30, 16, torch.float16, seed=2)
    out = kernels.flash_attention(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    out_lse = kernels.flash_attention(q, k, v, return_log_normalizer=True)
    assert len(out_lse) == 2 and out_lse[1].shape == (1, 2, 20)
    out_total = kernels.flash_attention(q, k, v, return_total_attention=True)
    assert len(out_total) == 2 and out_total[1].shape == (1, 2, 30)
    everything = kernels.flash_attention(q, k, v, return_log_normalizer=True, return_total_attention=True)
    assert len(everything) == 3
    assert torch.equal(everything[0], out) and torch.equal(everything[1], out_lse[1])
    assert torch.equal(everything[2], out_total[1])


def test_total_is_not_differentiable_and_out_still_is():
    q, k, v, do = (t.requires_grad_() for t in make_qkv(1, 2, 2, 20, 20, 16, torch.float32, seed=3))
    out, total = kernels.flash_attention(q, k, v, return_total_attention=True)
    assert out.requires_grad and not total.requires_grad and total.grad_fn is None
    dq, = torch.autograd.grad(out, q, do.detach())
    assert dq.shape == q.shape


def test_total_of_empty_sequences():
    q, k, v, _ = make_qkv(1, 2, 2, 0, 7, 16, torch.float16, seed=4)
    _, total = kernels.flash_attention(q, k, v, return_total_attention=True)
    assert total.shape == (1, 2, 7) and not total.any()
    q, k, v, _ = make_qkv(1, 2, 2, 7, 0, 16, torch.float16, seed=4)
    _, total = kernels.flash_attention(q, k, v, return_total_attention=True)
    assert total.shape == (1, 2, 0)


def test_reference_total_is_chunk_invariant():
    q, k, v, _ = make_qkv(2, 4, 2, 37, 29, 16, torch.float32, seed=5)
    whole = attention_forward(q, k, v, causal=True, return_total=True)[2]
    chunked = attention_forward(q, k, v, causal=True, return_total=True, max_chunk_bytes=5000)[2]
    assert (whole - chunked).abs().max().item() < 1e-12
    assert len(attention_forward(q, k, v, precision=REFERENCE)) == 2  # default: (out, lse)
