"""piecewise_attention: the chunked reference against a dense float64 autograd oracle, the Triton
kernels (interpreted on CPU) against the reference by the 2x rule, its relation to
flash_attention at the extreme thresholds, poisoning, and every argument error."""

import math

import pytest
import torch

from conformance.backends import activate, cuda_profile

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402
from conformance.bundled.kernels import piecewise as kernels_piecewise  # noqa: E402
from conformance.judging.rule import floor, judge, max_abs_error  # noqa: E402
from conformance.bundled.benchmarks.piecewise_split import selecting_path_swaps  # noqa: E402
from conformance.bundled.kernels.piecewise import piecewise_attention  # noqa: E402
from conformance.bundled.reference import MATCHED, REFERENCE, attention_forward  # noqa: E402
from conformance.bundled.reference.chunking import DEFAULT_MAX_CHUNK_BYTES  # noqa: E402
from conformance.bundled.reference.piecewise import _near, _setup, piecewise_backward, piecewise_forward  # noqa: E402

DEVICE = PROFILE.device
GRADS = ("dq1", "dk1", "dq2", "dk2", "dv")
DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def make_inputs(seed, b=1, h=4, hkv=2, sq=32, sk=32, d=16, dtype=torch.float64):
    """Seeded q1, k1, q2, k2, v and the output gradient do, drawn in fp32 on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(b, h, sq, d), (b, hkv, sk, d), (b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d),
              (b, h, sq, d)]
    return [torch.randn(s, generator=gen).to(dtype) for s in shapes]


def dense_oracle(q1, k1, q2, k2, v, do, threshold, causal, scale=None):
    """out, lse and the five gradients in float64, from the whole score matrix and autograd.

    Independent of reference/: repeats kv heads, selects with torch.where, uses torch.softmax;
    rows with no visible key are forced to out = 0 and lse = -inf."""
    xs = [x.detach().double().requires_grad_() for x in (q1, k1, q2, k2, v)]
    q1_, k1_, q2_, k2_, v_ = xs
    sq, sk, d = q1.shape[2], k1.shape[2], q1.shape[3]
    group = q1.shape[1] // k1.shape[1]
    k1_, k2_, v_ = (x.repeat_interleave(group, dim=1) for x in (k1_, k2_, v_))
    pos = torch.arange(sq)[:, None] + (sk - sq)
    key = torch.arange(sk)[None, :]
    near = pos - key < threshold
    s = torch.where(near, q1_ @ k1_.mT, q2_ @ k2_.mT) * (scale or 1.0 / math.sqrt(d))
    visible = key <= pos if causal else torch.ones(sq, sk, dtype=torch.bool)
    empty = ~visible.any(dim=-1)
    s = s.masked_fill(~visible, -math.inf).masked_fill(empty[:, None], 0.0)
    out = (torch.softmax(s, dim=-1) * (~empty)[:, None]) @ v_
    lse = torch.logsumexp(s, dim=-1).masked_fill(empty, -math.inf)
    grads = torch.autograd.grad(out, xs, do.double())
    return (out.detach(), lse.detach(), *grads)


def run_reference(q1, k1, q2, k2, v, do, threshold, causal, precision=REFERENCE, **kw):
    qkv = (q1, k1, q2, k2, v)
    out, lse = piecewise_forward(*qkv, threshold, causal=causal, precision=precision, **kw)
    grads = piecewise_backward(*qkv, out, do, lse, threshold, causal=causal,
                               precision=precision, **kw)
    return (out, lse, *grads)


def run_kernel(q1, k1, q2, k2, v, do, threshold, causal):
    xs = [x.to(DEVICE).requires_grad_() for x in (q1, k1, q2, k2, v)]
    with kernels.poisoned_outputs():
        out = piecewise_attention(*xs, threshold, causal=causal)
        grads = torch.autograd.grad(out, xs, do.to(DEVICE))
    return (out, *grads)


# ---------------------------------------------------------------------------------------------
# reference/piecewise.py against the dense oracle


@pytest.mark.parametrize("threshold", [0, 1, 7, 1000])
@pytest.mark.parametrize("d", [16, 64])
@pytest.mark.parametrize("sq,sk", [(32, 32), (17, 40), (40, 17)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_reference_matches_dense_oracle(causal, sq, sk, d, threshold):
    xs = make_inputs(seed=sq * 100 + sk + d + threshold, sq=sq, sk=sk, d=d)
    got = run_reference(*xs, threshold, causal)
    want = dense_oracle(*xs, threshold, causal)
    for name, g, w in zip(("out", "lse") + GRADS, got, want):
        assert g.dtype == torch.float64 and g.shape == w.shape, name
        assert max_abs_error(g, w) <= 1e-10, (name, max_abs_error(g, w))


def test_reference_mqa_custom_scale_and_low_precision_inputs():
    xs = make_inputs(seed=11, h=4, hkv=1, sq=24, sk=40, d=16, dtype=torch.float16)
    qkv, do = xs[:5], xs[5]
    out, lse = piecewise_forward(*qkv, 5, causal=True, sm_scale=0.3)
    got = (out, lse, *piecewise_backward(*qkv, out, do, lse, 5, causal=True, sm_scale=0.3))
    for name, g, w in zip(("out", "lse") + GRADS, got, dense_oracle(*xs, 5, True, scale=0.3)):
        assert max_abs_error(g, w) <= 1e-10, name


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("max_chunk_bytes", [1, 5000])
def test_chunking_does_not_change_the_result(causal, max_chunk_bytes):
    xs = make_inputs(seed=5, b=2, h=4, hkv=2, sq=37, sk=29, d=16)
    whole = run_reference(*xs, 6, causal)
    chunked = run_reference(*xs, 6, causal, max_chunk_bytes=max_chunk_bytes)
    for name, a, b in zip(("out", "lse") + GRADS, whole, chunked):
        assert max_abs_error(b, a) <= 1e-12, name


@pytest.mark.parametrize("precision", [REFERENCE, MATCHED], ids=["reference", "matched"])
def test_reference_extremes_are_plain_attention(precision):
    """Selection is exact, so both precisions reproduce attention_forward bit for bit."""
    q1, k1, q2, k2, v, _ = make_inputs(seed=9, sq=40, sk=17, dtype=torch.float16)
    for threshold, (q, k) in ((40 + 17, (q1, k1)), (0, (q2, k2))):
        got = piecewise_forward(q1, k1, q2, k2, v, threshold, causal=True, precision=precision)
        want = attention_forward(q, k, v, causal=True, precision=precision)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), threshold


# ---------------------------------------------------------------------------------------------
# the signed distance, pinned on hand-computed selections

# far[i][j] = 1 where (query i, key j) is scored with q2_i . k2_j, worked out by hand from
# FlagAttention's rule (far iff i + Sk - Sq - j >= threshold; the distance is signed).
HAND_FAR = {
    # Sq < Sk: query i sits at key i + 2; far only on keys at least 2 before it.
    (3, 5, 2): [[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [1, 1, 1, 0, 0]],
    # Sq > Sk: query i sits at key i - 2; far only on keys at least 1 before it.
    (5, 3, 1): [[0, 0, 0],
                [0, 0, 0],
                [0, 0, 0],
                [1, 0, 0],
                [1, 1, 0]],
    # Threshold 0, not causal: keys after the aligned position (i + 2) still use q1 . k1.
    (3, 5, 0): [[1, 1, 1, 0, 0],
                [1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]],
}


def literal_oracle(q1, k1, q2, k2, v, do, far):
    """out and the five gradients in float64, non-causal, selecting by the literal matrix."""
    xs = [x.detach().double().requires_grad_() for x in (q1, k1, q2, k2, v)]
    q1_, k1_, q2_, k2_, v_ = xs
    far = torch.tensor(far, dtype=torch.bool)
    s = torch.where(far, q2_ @ k2_.mT, q1_ @ k1_.mT) / math.sqrt(q1.shape[-1])
    out = torch.softmax(s, dim=-1) @ v_
    return (out.detach(), *torch.autograd.grad(out, xs, do.double()))


@pytest.mark.parametrize("sq,sk,threshold", list(HAND_FAR))
def test_reference_selection_is_the_hand_computed_one(sq, sk, threshold):
    xs = make_inputs(seed=21, h=2, hkv=2, sq=sq, sk=sk, d=16)
    st = _setup(tuple(xs[:4]), xs[4], threshold, False, None, REFERENCE, DEFAULT_MAX_CHUNK_BYTES)
    far = torch.tensor(HAND_FAR[sq, sk, threshold], dtype=torch.bool)
    assert torch.equal(~_near(st, 0, sq, sk, "cpu"), far)
    assert torch.equal(~_near(st, 1, sq - 1, sk, "cpu"), far[1:])  # a block not at row 0
    got = run_reference(*xs, threshold, False)
    want = literal_oracle(*xs, HAND_FAR[sq, sk, threshold])
    for name, g, w in zip(("out",) + GRADS, (got[0], *got[2:]), want):
        assert max_abs_error(g, w) <= 1e-10, (name, max_abs_error(g, w))


@pytest.mark.parametrize("sq,sk,threshold", list(HAND_FAR))
def test_kernel_selection_is_the_hand_computed_one(sq, sk, threshold):
    xs = make_inputs(seed=22, h=2, hkv=2, sq=sq, sk=sk, d=16, dtype=torch.float32)
    got = run_kernel(*xs, threshold, False)
    want = literal_oracle(*xs, HAND_FAR[sq, sk, threshold])
    for name, g, w in zip(("out",) + GRADS, got, want):
        assert max_abs_error(g.double().cpu(), w) <= 1e-5, (name, max_abs_error(g.double().cpu(), w))


# ---------------------------------------------------------------------------------------------
# the kernels against the reference: the 2x rule


def assert_kernel_passes_the_rule(dtype, causal, sq, sk, threshold, d=32):
    xs = make_inputs(seed=sq + sk + threshold, h=4, hkv=2, sq=sq, sk=sk, d=d, dtype=dtype)
    kernel = run_kernel(*xs, threshold, causal)
    ref = run_reference(*xs, threshold, causal)
    matched = run_reference(*xs, threshold, causal, precision=MATCHED)
    for i, name in enumerate(("out",) + GRADS):
        r, m = ref[i + (i > 0)], matched[i + (i > 0)]  # skip lse
        assert not kernel[i].isnan().any(), name
        kernel_err, torch_err = max_abs_error(kernel[i], r), max_abs_error(m, r)
        verdict = judge(kernel_err, torch_err, floor(DTYPE_NAME[dtype], r))
        assert verdict.passed, (name, kernel_err, torch_err, verdict.ratio)


# Thresholds chosen so that, with the interpreter's 64 x 64 tiles, there are tiles across the
# threshold, tiles wholly near (45 x 130, T = 80) and (130 x 130, T = 3) tiles wholly far.
@pytest.mark.parametrize("sq,sk,threshold", [(70, 45, 20), (45, 130, 80), (130, 130, 3)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_kernel_passes_the_rule(dtype, causal, sq, sk, threshold):
    assert_kernel_passes_the_rule(dtype, causal, sq, sk, threshold)


def test_kernel_passes_the_rule_fp32_d64():
    assert_kernel_passes_the_rule(torch.float32, True, 45, 130, 80, d=64)


@pytest.mark.skipif(96 not in PROFILE.head_dims, reason="head_dim 96 not supported here")
def test_kernel_passes_the_rule_padded_head_dim():
    assert_kernel_passes_the_rule(torch.bfloat16, False, 70, 45, 20, d=96)


def test_every_output_element_is_written():
    xs = make_inputs(seed=12, h=4, hkv=2, sq=70, sk=45, d=16, dtype=torch.float16)
    out, dq1, dk1, dq2, dk2, dv = run_kernel(*xs, 9, causal=True)
    for name, t in zip(("out",) + GRADS, (out, dq1, dk1, dq2, dk2, dv)):
        assert not t.isnan().any(), name
    # Causal with Sq > Sk: the first Sq - Sk rows see no key.
    assert not out[..., :25, :].any() and not dq1[..., :25, :].any() and not dq2[..., :25, :].any()


def same_result(got, want, dtype):
    """Bitwise on the interpreter, where both operators run the same tiles (the flash
    tables; a profile with piecewise tables of other tile sizes sums in another order).
    Elsewhere within a few roundings: a different kernel may be compiled differently."""
    if PROFILE.interpreted:
        return torch.equal(got, want)
    return max_abs_error(got, want) <= 4 * floor(DTYPE_NAME[dtype], want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_extreme_thresholds_are_flash_attention(dtype):
    """A tile wholly inside (outside) the band computes exactly the flash kernels' arithmetic
    on (q1, k1) ((q2, k2)), in the same order; the unused pair's gradients are exact zeros."""
    q1, k1, q2, k2, v, do = make_inputs(seed=13, h=4, hkv=2, sq=70, sk=45, d=16, dtype=dtype)
    got_far = run_kernel(q1, k1, q2, k2, v, do, 0, causal=True)
    got_near = run_kernel(q1, k1, q2, k2, v, do, 70 + 45, causal=True)
    for got, (q, k), (dq, dk) in ((got_near, (q1, k1), (1, 2)), (got_far, (q2, k2), (3, 4))):
        xs = [x.to(DEVICE).requires_grad_() for x in (q, k, v)]
        out = kernels.flash_attention(*xs, causal=True)
        want = (out, *torch.autograd.grad(out, xs, do.to(DEVICE)))
        for i, j in ((0, 0), (dq, 1), (dk, 2), (5, 3)):
            assert same_result(got[i], want[j], dtype), (i, j)
        unused = [got[i] for i in range(1, 5) if i not in (dq, dk)]
        assert all(not g.any() for g in unused)


def test_strided_inputs_are_read_in_place():
    """(B, S, H, D) memory viewed as (B, H, S, D) gives bitwise the contiguous result."""
    xs = make_inputs(seed=16, h=2, hkv=1, sq=33, sk=47, d=16, dtype=torch.float16)
    strided = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in xs]
    assert not strided[0].is_contiguous() and not strided[5].is_contiguous()
    expected = run_kernel(*xs, 6, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(run_kernel(*strided, 6, causal=True), expected))


def test_grid_split_over_batch_heads(monkeypatch):
    """B*H beyond the grid limit is covered by several launches (kernels.launch): the
    same result, bit for bit, as one launch."""
    xs = make_inputs(seed=15, b=2, h=4, hkv=2, sq=20, sk=33, d=16, dtype=torch.float16)
    whole = run_kernel(*xs, 5, causal=True)
    monkeypatch.setattr(kernels_launch, "MAX_GRID_BATCH_HEADS", 3)
    split = run_kernel(*xs, 5, causal=True)
    assert all(torch.equal(a, b) for a, b in zip(whole, split))


def test_empty_sequences():
    xs = [x.to(DEVICE) for x in make_inputs(seed=14, sq=0, dtype=torch.float16)[:5]]
    assert piecewise_attention(*xs, 3).shape == xs[0].shape
    xs = [x.to(DEVICE).requires_grad_() for x in make_inputs(seed=14, sk=0, dtype=torch.float16)[:5]]
    out = piecewise_attention(*xs, 3, causal=True)
    grads = torch.autograd.grad(out, xs, torch.ones_like(out))
    assert not out.any() and all(not g.any() for g in grads)


# ---------------------------------------------------------------------------------------------
# argument errors


def _unsupported_head_dim():
    return next(d for d in (24, 8, 320) if d not in PROFILE.head_dims)


def _qkv(d=16):
    return [x.to(DEVICE) for x in make_inputs(seed=0, h=2, hkv=2, sq=8, sk=8, d=d, dtype=torch.float16)[:5]]


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda a: (a[0][0], *a[1:]), ValueError, r"q1: expected a rank-4 tensor"),
        (lambda a: (*a[:3], "k2", a[4]), TypeError, r"k2: expected a torch.Tensor"),
        (lambda a: (*a[:4], a[4].to(torch.int32)), TypeError, r"v: expected dtype in"),
        (lambda a: (a[0], a[1], a[2][:, :, :-1], *a[3:]), ValueError,
         r"q2: expected the same shape as q1 \(1, 2, 8, 16\)"),
        (lambda a: (*a[:3], a[3][:, :, :-1], a[4]), ValueError,
         r"k2: expected the same shape as k1 \(1, 2, 8, 16\)"),
        (lambda a: (a[0], a[1].float(), *a[2:]), ValueError, r"k1: expected the same dtype as q1"),
        (lambda a: (*a[:4], a[4][:, :, :-1]), ValueError, r"v: expected the same shape as k1"),
        (lambda a: (a[0], *(x[..., :8] for x in a[1:2]), a[2], *(x[..., :8] for x in a[3:])),
         ValueError, r"k1: expected head_dim 16 \(from q1\)"),
        (lambda a: (a[0].repeat(1, 2, 1, 1)[:, :3], a[1], a[2].repeat(1, 2, 1, 1)[:, :3], *a[3:]),
         ValueError, r"number of kv heads \(2\) must divide the number of query heads \(3\)"),
    ],
)
def test_bad_tensors_are_named(mutate, error, match):
    with pytest.raises(error, match=match):
        piecewise_attention(*mutate(_qkv()), 3)


def test_unsupported_head_dim_lists_supported_ones():
    d = _unsupported_head_dim()
    with pytest.raises(ValueError, match=rf"q1: head_dim {d} is not supported by the kernels; "
                                         r"supported head dims: 16, 32"):
        piecewise_attention(*_qkv(d=d), 3)


@pytest.mark.parametrize("threshold, error", [(-1, ValueError), (2.5, TypeError),
                                               (True, TypeError), (None, TypeError)])
def test_bad_dist_threshold(threshold, error):
    with pytest.raises(error, match=r"dist_threshold: expected a non-negative int, got"):
        piecewise_attention(*_qkv(), threshold)


@pytest.mark.parametrize("scale, error, match", [
    (float("nan"), ValueError, r"softmax_scale: expected a finite positive number"),
    (0.0, ValueError, r"softmax_scale: expected a finite positive number"),
    ("0.1", TypeError, r"softmax_scale: expected a Python float or None"),
])
def test_bad_softmax_scale(scale, error, match):
    with pytest.raises(error, match=match):
        piecewise_attention(*_qkv(), 3, softmax_scale=scale)


def test_bad_causal():
    with pytest.raises(TypeError, match=r"causal: expected a bool, got str"):
        piecewise_attention(*_qkv(), 3, causal="yes")


def test_cpu_tensors_on_a_gpu_backend(monkeypatch):
    monkeypatch.setattr(kernels_piecewise, "current_target", lambda: cuda_profile((9, 0)).target)
    cpu = [x.cpu() for x in _qkv()]
    with pytest.raises(ValueError, match=r"q1: tensor is on the CPU"):
        piecewise_attention(*cpu, 3)


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a, t: (a, -2), ValueError, r"dist_threshold: expected a non-negative int, got -2"),
    (lambda a, t: (a, 1.5), TypeError, r"dist_threshold: expected a non-negative int, got float"),
    (lambda a, t: ((a[0], a[1], a[2][:, :1], *a[3:]), t), ValueError, r"q2 shape .* does not match q1"),
    (lambda a, t: ((*a[:3], a[3].float(), a[4]), t), ValueError, r"k2 dtype .* does not match k1"),
])
def test_reference_argument_errors(mutate, error, match):
    args, threshold = mutate(_qkv(), 3)
    with pytest.raises(error, match=match):
        piecewise_forward(*args, threshold)


def _noting_calls(helper, label: str, called: set):
    """`helper`, adding `label` to `called` whenever a kernel calls it."""
    def noted(*args, **kwargs):
        called.add(label)
        return helper(*args, **kwargs)
    return noted


@pytest.mark.skipif(not PROFILE.interpreted, reason="swaps the kernels' helpers, which only the interpreter looks up late")
@pytest.mark.parametrize("sq,sk,threshold,causal", [(130, 130, 3, True), (45, 130, 80, False), (200, 77, 40, True)])
def test_one_product_tiles_equal_the_selecting_path(monkeypatch, sq, sk, threshold, causal):
    """The near-only and far-only loops (one score product each) give, bit for bit, what
    every tile through the selecting path (both products) gives."""
    xs = make_inputs(seed=sq + threshold, h=4, hkv=2, sq=sq, sk=sk, d=16, dtype=torch.float16)
    split = run_kernel(*xs, threshold, causal)
    swapped, called = set(), set()
    for module, name, helper in selecting_path_swaps():
        label = f"{module.__name__}.{name}"
        swapped.add(label)
        monkeypatch.setattr(module, name, _noting_calls(helper, label, called), raising=True)
    selecting = run_kernel(*xs, threshold, causal)
    assert called == swapped  # the kernels called every swap: no tile took a one-product loop
    for name, a, b in zip(("out",) + GRADS, split, selecting):
        assert torch.equal(a, b), name
