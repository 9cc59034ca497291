"""Bad arguments of the variants -- window_size, softcap, alibi_slopes and every argument of
flash_attention_varlen -- are refused before anything is launched, with a ValueError or
TypeError whose message names the argument."""

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402

DEVICE = PROFILE.device


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """Any launch fails the test: every check must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched for bad input")
    monkeypatch.setattr(kernels_launch, "_launcher", refuse)


def dense(heads=2, kv_heads=1):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=gen, dtype=torch.float16).to(DEVICE)
            for shape in ((2, heads, 8, 16), (2, kv_heads, 9, 16), (2, kv_heads, 9, 16))]


@pytest.mark.parametrize("options, error, match", [
    (dict(window_size=(-2, 0)), ValueError, r"window_size: expected bounds >= -1 \(-1 = unbounded\), got \(-2, 0\)"),
    (dict(window_size=(3, -5)), ValueError, r"window_size: expected bounds >= -1"),
    (dict(window_size=(3,)), TypeError, r"window_size: expected None or a pair \(left, right\) of ints, got \(3,\)"),
    (dict(window_size=4), TypeError, r"window_size: expected None or a pair"),
    (dict(window_size=(1.5, 2)), TypeError, r"window_size: expected None or a pair \(left, right\) of ints"),
    (dict(window_size=(True, 2)), TypeError, r"window_size: expected None or a pair"),
    (dict(softcap=0.0), ValueError, r"softcap: expected a finite number > 0 \(None for no cap\), got 0.0"),
    (dict(softcap=-3), ValueError, r"softcap: expected a finite number > 0"),
    (dict(softcap=float("nan")), ValueError, r"softcap: expected a finite number > 0"),
    (dict(softcap=float("inf")), ValueError, r"softcap: expected a finite number > 0"),
    (dict(softcap="30"), TypeError, r"softcap: expected a Python float > 0 or None, got str"),
    (dict(softcap=True), TypeError, r"softcap: expected a Python float > 0 or None, got bool"),
    (dict(alibi_slopes=[0.1, 0.2]), TypeError, r"alibi_slopes: expected a torch.Tensor or None, got list"),
    (dict(alibi_slopes=torch.ones(2, dtype=torch.float16)), TypeError,
     r"alibi_slopes: expected dtype torch.float32, got torch.float16"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, r"alibi_slopes: expected shape \(2,\) or \(2, 2\), got \(3,\)"),
    (dict(alibi_slopes=torch.ones(1, 2)), ValueError, r"alibi_slopes: expected shape \(2,\) or \(2, 2\), got \(1, 2\)"),
    (dict(alibi_slopes=torch.ones(2, device="meta")), ValueError,
     r"alibi_slopes: expected a tensor on cpu \(the inputs' device\), got meta"),
])
def test_bad_variant_options_of_the_dense_operator_are_named(options, error, match):
    with pytest.raises(error, match=match):
        kernels.flash_attention(*dense(), **options)


def varlen_args(lengths_q=(3, 0, 5), lengths_k=(4, 2, 6), heads=2, kv_heads=1):
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(sum(lengths_q), heads, 16, generator=gen, dtype=torch.float16)
    k, v = (torch.randn(sum(lengths_k), kv_heads, 16, generator=gen, dtype=torch.float16) for _ in range(2))
    cumulative = lambda lengths: torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return dict(q=q, k=k, v=v, cu_seqlens_q=cumulative(lengths_q), cu_seqlens_k=cumulative(lengths_k),
                max_seqlen_q=max(lengths_q), max_seqlen_k=max(lengths_k))


def replaced(**changes):
    def change(args):
        return {**args, **{name: value(args) for name, value in changes.items()}}
    return change


@pytest.mark.parametrize("change, error, match", [
    (replaced(q=lambda a: a["q"][None]), ValueError,
     r"q: expected a rank-3 tensor \(total_tokens, heads, head_dim\), got shape \(1, 8, 2, 16\)"),
    (replaced(k=lambda a: a["k"][None], v=lambda a: a["v"][None]), ValueError, r"k: expected a rank-3 tensor"),
    (replaced(v=lambda a: a["v"][:-1]), ValueError, r"v: expected the same shape as k"),
    (replaced(q=lambda a: a["q"].repeat(1, 2, 1)[:, :3], k=lambda a: a["k"].repeat(1, 2, 1),
              v=lambda a: a["v"].repeat(1, 2, 1)), ValueError,
     r"k: number of kv heads \(2\) must divide the number of query heads \(3\)"),
    (replaced(k=lambda a: a["k"][..., :8], v=lambda a: a["v"][..., :8]), ValueError, r"k: expected head_dim 16"),
    (replaced(v=lambda a: a["v"].float()), ValueError, r"v: expected the same dtype as q"),
    (replaced(cu_seqlens_q=lambda a: a["cu_seqlens_q"].long()), TypeError,
     r"cu_seqlens_q: expected dtype torch.int32, got torch.int64"),
    (replaced(cu_seqlens_k=lambda a: a["cu_seqlens_k"].tolist()), TypeError,
     r"cu_seqlens_k: expected a torch.Tensor, got list"),
    (replaced(cu_seqlens_q=lambda a: a["cu_seqlens_q"][None]), ValueError,
     r"cu_seqlens_q: expected a 1-D tensor of batch \+ 1 offsets, got shape \(1, 4\)"),
    (replaced(cu_seqlens_k=lambda a: a["cu_seqlens_k"] + 1), ValueError,
     r"cu_seqlens_k: expected the offsets to start at 0, got 1"),
    (replaced(cu_seqlens_q=lambda a: torch.tensor([0, 5, 3, 8], dtype=torch.int32)), ValueError,
     r"cu_seqlens_q: expected non-decreasing offsets, got 3 after 5 \(index 2\)"),
    (replaced(cu_seqlens_q=lambda a: torch.tensor([0, 3, 3, 7], dtype=torch.int32)), ValueError,
     r"cu_seqlens_q: expected the last offset to equal the number of tokens \(8\), got 7"),
    (replaced(cu_seqlens_k=lambda a: a["cu_seqlens_k"].to("meta")), ValueError,
     r"cu_seqlens_k: expected a tensor on cpu \(q's device\), got meta"),
    (replaced(cu_seqlens_k=lambda a: torch.tensor([0, 4, 12], dtype=torch.int32)), ValueError,
     r"cu_seqlens_k: expected as many offsets as cu_seqlens_q \(4: one sequence of k per sequence of q\), got 3"),
    (replaced(max_seqlen_q=lambda a: 4), ValueError,
     r"max_seqlen_q: expected at least the longest sequence's length \(5\), got 4"),
    (replaced(max_seqlen_k=lambda a: 5.0), TypeError, r"max_seqlen_k: expected an int, got float"),
    (replaced(max_seqlen_k=lambda a: torch.tensor(6)), TypeError, r"max_seqlen_k: expected an int, got Tensor"),
])
def test_bad_varlen_arguments_are_named(change, error, match):
    args = change(varlen_args())
    with pytest.raises(error, match=match):
        kernels.flash_attention_varlen(**args)


@pytest.mark.parametrize("options, error, match", [
    (dict(alibi_slopes=torch.ones(2, 2)), ValueError, r"alibi_slopes: expected shape \(2,\) or \(3, 2\), got \(2, 2\)"),
    (dict(window_size=(0, -3)), ValueError, r"window_size: expected bounds >= -1"),
    (dict(softcap=-1.0), ValueError, r"softcap: expected a finite number > 0"),
    (dict(causal=1), TypeError, r"causal: expected a bool, got int"),
    (dict(sm_scale=0.0), ValueError, r"sm_scale: expected a finite positive number"),
    (dict(dropout_p=1.0), ValueError, r"dropout_p: expected a probability in \[0, 1\)"),
    (dict(return_log_normalizer="yes"), TypeError, r"return_log_normalizer: expected a bool, got str"),
])
def test_bad_varlen_options_are_named(options, error, match):
    with pytest.raises(error, match=match):
        kernels.flash_attention_varlen(**varlen_args(), **options)


def test_varlen_has_no_total_attention():
    with pytest.raises(TypeError, match="return_total_attention"):
        kernels.flash_attention_varlen(**varlen_args(), return_total_attention=True)


def test_offsets_are_read_once_and_again_after_an_in_place_change(monkeypatch):
    """A cu_seqlens tensor's values reach the host once (a read that waits for the GPU): the
    same unchanged tensor is not read again, while an in-place change, or another token
    count, is read and checked again."""
    from conformance.bundled.kernels import validation

    offsets = varlen_args()["cu_seqlens_q"]
    expected = offsets.tolist()
    assert validation.check_cu_seqlens("cu_seqlens_q", offsets, 8, offsets.device) == expected
    reads = []
    read = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda tensor: reads.append(tensor) or read(tensor))
    assert validation.check_cu_seqlens("cu_seqlens_q", offsets, 8, offsets.device) == expected
    assert reads == []
    with pytest.raises(ValueError, match=r"cu_seqlens_q: expected the last offset to equal the number of tokens \(9\)"):
        validation.check_cu_seqlens("cu_seqlens_q", offsets, 9, offsets.device)
    offsets[1] = 6  # after 5 tokens came 3: now 6 then 3
    with pytest.raises(ValueError, match=r"cu_seqlens_q: expected non-decreasing offsets, got 3 after 6"):
        validation.check_cu_seqlens("cu_seqlens_q", offsets, 8, offsets.device)
    assert len(reads) == 2
