"""Tests of reference/: REFERENCE against a dense float64 autograd oracle, chunking invariance,
empty-row semantics, MATCHED precision behaviour and argument validation."""

import math

import pytest
import torch

from conformance.bundled.reference import MATCHED, REFERENCE, Dropout, Precision, attention_backward, attention_forward
from conformance.bundled.reference.chunking import LIVE_SCORE_BLOCKS, plan_chunks
from conformance.bundled.reference.tf32 import ieee_fp32_matmul

F64_TOL = 1e-10


# ---------------------------------------------------------------------------------------------
# helpers


def make_inputs(seed, b=2, h=4, hkv=2, sq=32, sk=32, d=16, dtype=torch.float64, noncontig=False):
    """Seeded q (B,H,Sq,D), k, v (B,Hkv,Sk,D), do (B,H,Sq,D); transposed views if noncontig."""
    g = torch.Generator().manual_seed(seed)

    def rand(heads, s):
        if noncontig:  # every other element of (B, S, heads, 2D) storage, seen as (B, heads, S, D)
            x = torch.randn(b, s, heads, 2 * d, generator=g, dtype=dtype)
            return x[..., ::2].transpose(1, 2)
        return torch.randn(b, heads, s, d, generator=g, dtype=dtype)

    q, k, v, do = rand(h, sq), rand(hkv, sk), rand(hkv, sk), rand(h, sq)
    if noncontig:
        assert not q.is_contiguous() and not k.is_contiguous()
    return q, k, v, do


def naive_attention(q, k, v, causal, sm_scale=None, keep=None, p_drop=0.0, with_total=False):
    """Dense float64 oracle, differentiable: returns out (B,H,Sq,D) and lse (B,H,Sq) (and the
    total attention (B,H,Sk) if ``with_total``).

    Independent of the implementation: it repeats kv heads, builds the whole score matrix and uses
    torch.softmax; rows with no visible key are forced to out = 0 and lse = -inf. ``keep``
    (B,H,Sq,Sk) is a dropout keep mask: out = (keep * P / (1 - p_drop)) @ v.
    """
    sq, sk, d = q.shape[2], k.shape[2], q.shape[3]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    s = q @ k.transpose(-1, -2) * scale
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    visible = (j <= i + (sk - sq)) if causal else torch.ones(sq, sk, dtype=torch.bool)
    empty = ~visible.any(dim=-1)  # (Sq,)
    s = s.masked_fill(~visible, float("-inf")).masked_fill(empty[:, None], 0.0)
    p = torch.softmax(s, dim=-1) * (~empty)[:, None]
    lse = torch.logsumexp(s, dim=-1).masked_fill(empty, float("-inf"))
    weights = p if keep is None else p * keep / (1 - p_drop)
    return (weights @ v, lse) + ((p.sum(dim=-2),) if with_total else ())


def oracle(q, k, v, do, causal, sm_scale=None, keep=None, p_drop=0.0):
    """Oracle out, lse, dq, dk, dv in float64 via autograd."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    out, lse = naive_attention(q, k, v, causal, sm_scale, keep, p_drop)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), do.double())
    return out.detach(), lse.detach(), dq, dk, dv


def run(q, k, v, do, causal, precision=REFERENCE, **kw):
    out, lse = attention_forward(q, k, v, causal=causal, precision=precision, **kw)
    grads = attention_backward(q, k, v, out, do, lse, causal=causal, precision=precision, **kw)
    return (out, lse) + tuple(grads)


def max_err(a, b):
    """Max |a - b| in float64, treating matching infinities as equal."""
    a, b = a.double(), b.double()
    both_inf = torch.isinf(a) & torch.isinf(b) & (a == b)
    return (a - b).masked_fill(both_inf, 0.0).abs().max().item() if a.numel() else 0.0


NAMES = ("out", "lse", "dq", "dk", "dv")


# ---------------------------------------------------------------------------------------------
# REFERENCE against the oracle


@pytest.mark.parametrize("noncontig", [False, True], ids=["contig", "noncontig"])
@pytest.mark.parametrize("d", [16, 24, 64])
@pytest.mark.parametrize("hkv", [1, 2, 4])
@pytest.mark.parametrize("sq,sk", [(32, 32), (17, 40), (40, 17)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_reference_matches_autograd_oracle(causal, sq, sk, hkv, d, noncontig):
    q, k, v, do = make_inputs(seed=sq * 100 + sk + d + hkv, h=4, hkv=hkv, sq=sq, sk=sk, d=d,
                              noncontig=noncontig)
    got = run(q, k, v, do, causal)
    want = oracle(q, k, v, do, causal)
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == torch.float64, name
        assert g.shape == w.shape, name
        assert not torch.isnan(g).any(), name
        assert max_err(g, w) <= F64_TOL, (name, max_err(g, w))


def test_reference_upcasts_low_precision_inputs_and_custom_scale():
    q, k, v, do = make_inputs(seed=3, sq=24, sk=40, d=24, dtype=torch.float16)
    got = run(q, k, v, do, causal=True, sm_scale=0.3)
    want = oracle(q, k, v, do, causal=True, sm_scale=0.3)
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == torch.float64, name
        assert max_err(g, w) <= F64_TOL, (name, max_err(g, w))


def test_inputs_requiring_grad_are_accepted_and_untouched():
    q, k, v, do = make_inputs(seed=4)
    q.requires_grad_()
    out, lse = attention_forward(q, k, v)
    attention_backward(q, k, v, out, do, lse)
    assert not out.requires_grad and q.grad is None


# ---------------------------------------------------------------------------------------------
# dropout replay and total attention


def random_keep(seed, shape, p_drop):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) >= p_drop


@pytest.mark.parametrize("max_chunk_bytes", [2**30, 5000], ids=["whole", "chunked"])
@pytest.mark.parametrize("sq,sk", [(37, 29), (29, 37)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dropout_replay_matches_oracle(causal, sq, sk, max_chunk_bytes):
    q, k, v, do = make_inputs(seed=sq + sk, b=2, h=4, hkv=2, sq=sq, sk=sk, d=16)
    keep = random_keep(1, (2, 4, sq, sk), 0.3)
    dropout = Dropout.from_dense(0.3, keep)
    got = run(q, k, v, do, causal, dropout=dropout, max_chunk_bytes=max_chunk_bytes)
    want = oracle(q, k, v, do, causal, keep=keep.double(), p_drop=0.3)
    for name, g, w in zip(NAMES, got, want):
        assert max_err(g, w) <= F64_TOL, (name, max_err(g, w))
    # lse is the un-dropped normaliser.
    assert max_err(got[1], run(q, k, v, do, causal, max_chunk_bytes=max_chunk_bytes)[1]) == 0.0


def test_dropout_keep_mask_is_asked_for_chunks_only():
    q, k, v, do = make_inputs(seed=2, b=1, h=4, hkv=2, sq=40, sk=24, d=16)
    keep = random_keep(2, (1, 4, 40, 24), 0.5)
    asked = []

    def keep_mask(batch_heads, rows, keys):
        asked.append((batch_heads, rows, keys))
        return keep.reshape(4, 40, 24)[slice(*batch_heads), slice(*rows), slice(*keys)]

    attention_forward(q, k, v, causal=True, dropout=Dropout(0.5, keep_mask), max_chunk_bytes=5000)
    assert len(asked) > 1 and all(r1 - r0 < 40 for _, (r0, r1), _ in asked)
    assert all(b1 - b0 == 2 and b0 % 2 == 0 for (b0, b1), _, _ in asked)  # one kv unit = 2 heads


@pytest.mark.parametrize("precision", [REFERENCE, MATCHED], ids=["reference", "matched"])
def test_matched_dropout_rounds_the_dropped_weights(precision):
    q, k, v, do = make_inputs(seed=3, b=1, h=2, hkv=2, sq=32, sk=48, d=16, dtype=torch.float16)
    keep = random_keep(3, (1, 2, 32, 48), 0.2)
    got = run(q, k, v, do, True, precision, dropout=Dropout.from_dense(0.2, keep))
    want = oracle(q, k, v, do, True, keep=keep.double(), p_drop=0.2)
    tol = 1e-10 if precision is REFERENCE else 1e-2
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == (torch.float64 if precision is REFERENCE else
                           torch.float32 if name == "lse" else torch.float16), name
        assert max_err(g, w) <= tol * max(1.0, w[torch.isfinite(w)].abs().max().item()), name


@pytest.mark.parametrize("precision", [REFERENCE, MATCHED], ids=["reference", "matched"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_total_attention_matches_oracle(causal, precision):
    q, k, v, _ = make_inputs(seed=4, b=2, h=4, hkv=1, sq=45, sk=30, d=16)  # causal: 15 empty rows
    out, lse, total = attention_forward(q, k, v, causal=causal, precision=precision, return_total=True,
                                        max_chunk_bytes=5000)
    _, _, want = naive_attention(q, k, v, causal, with_total=True)
    assert total.shape == (2, 4, 30) and total.dtype == precision.accumulate_dtype
    assert max_err(total, want) <= (1e-12 if precision is REFERENCE else 1e-5)


def test_dropout_arguments_are_checked():
    q, k, v, do = make_inputs(seed=5)
    with pytest.raises(TypeError, match=r"dropout must be a reference.Dropout or None, got float"):
        attention_forward(q, k, v, dropout=0.1)
    with pytest.raises(ValueError, match=r"dropout.p must be in \[0, 1\), got 1.0"):
        attention_forward(q, k, v, dropout=Dropout(1.0, lambda **_: None))
    wrong = Dropout(0.1, lambda batch_heads, rows, keys: torch.ones(1, 1, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"dropout.keep_mask: expected a bool tensor "
                       r"of shape \(8, 32, 32\), got torch.bool \(1, 1, 1\)"):
        attention_forward(q, k, v, dropout=wrong)


# ---------------------------------------------------------------------------------------------
# chunking


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("max_chunk_bytes", [1, 5000, 40_000])
def test_chunking_does_not_change_the_result(causal, max_chunk_bytes):
    q, k, v, do = make_inputs(seed=5, b=2, h=4, hkv=2, sq=37, sk=29, d=24)
    whole = run(q, k, v, do, causal)
    chunked = run(q, k, v, do, causal, max_chunk_bytes=max_chunk_bytes)
    for name, a, b in zip(NAMES, whole, chunked):
        assert max_err(a, b) <= 1e-12, (name, max_err(a, b))


def test_chunk_plan_respects_budget_and_splits_heads():
    # The design target: B=1, H=16, 32k x 32k, float64 -> chunk over heads and rows.
    plan = plan_chunks(n_units=16, group=1, sq=32768, sk=32768, elem_bytes=8,
                       max_chunk_bytes=512 * 2**20)
    assert plan.units == 1 and 1 <= plan.rows < 32768
    block = plan.units * 1 * plan.rows * 32768 * 8 * LIVE_SCORE_BLOCKS
    assert block <= 512 * 2**20
    # A small problem fits in one block; a tiny budget degrades to one unit by one row.
    assert plan_chunks(4, 2, 37, 29, 8, 2**30) == type(plan)(units=4, rows=37)
    assert plan_chunks(4, 2, 37, 29, 8, 1) == type(plan)(units=1, rows=1)


# ---------------------------------------------------------------------------------------------
# rows with no visible key


@pytest.mark.parametrize("precision", [REFERENCE, MATCHED], ids=["reference", "matched"])
def test_rows_without_visible_keys(precision):
    sq, sk = 40, 17  # causal, bottom-right: rows i < sq - sk see nothing
    dtype = torch.float64 if precision is REFERENCE else torch.float16
    q, k, v, do = make_inputs(seed=6, sq=sq, sk=sk, d=16, dtype=dtype)
    out, lse, dq, dk, dv = run(q, k, v, do, causal=True, precision=precision)
    empty = slice(0, sq - sk)
    for name, t in zip(NAMES, (out, lse, dq, dk, dv)):
        assert not torch.isnan(t).any(), name
    assert torch.all(out[:, :, empty] == 0)
    assert torch.all(torch.isneginf(lse[:, :, empty]))
    assert torch.isfinite(lse[:, :, sq - sk:]).all()
    assert torch.all(dq[:, :, empty] == 0)
    # The empty rows contribute nothing to dk/dv: dropping them changes nothing.
    tail = [x[:, :, sq - sk:] for x in (q, do)]
    _, _, _, dk_tail, dv_tail = run(tail[0], k, v, tail[1], causal=True, precision=precision)
    tol = 1e-12 if precision is REFERENCE else 0.0
    assert max_err(dk, dk_tail) <= tol and max_err(dv, dv_tail) <= tol


def test_all_rows_empty():
    q, k, v, do = make_inputs(seed=7, sq=8, sk=0, d=16)
    out, lse, dq, dk, dv = run(q, k, v, do, causal=True)
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse)) and torch.all(dq == 0)
    assert dk.shape == k.shape and dv.shape == v.shape


# ---------------------------------------------------------------------------------------------
# MATCHED


def relative_errors(dtype, causal=False, seed=8):
    """max |MATCHED - REFERENCE| / max |REFERENCE| for each of out, dq, dk, dv."""
    q, k, v, do = make_inputs(seed=seed, b=1, h=4, hkv=2, sq=128, sk=128, d=64,
                              dtype=torch.float32)
    q, k, v, do = (x.to(dtype) for x in (q, k, v, do))
    ref = run(q, k, v, do, causal)
    got = run(q, k, v, do, causal, precision=MATCHED)
    for name, g in zip(NAMES, got):
        assert g.dtype == (torch.float32 if name == "lse" else dtype), name
    return {name: max_err(g, r) / r.abs().max().item()
            for name, g, r in zip(NAMES, got, ref) if name != "lse"}


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matched_error_is_dtype_sized(causal):
    fp16 = relative_errors(torch.float16, causal)
    bf16 = relative_errors(torch.bfloat16, causal)
    fp32 = relative_errors(torch.float32, causal)
    for name in fp16:
        assert 0 < fp16[name] < 1e-2, (name, fp16[name])
        assert 0 < bf16[name] < 5e-2, (name, bf16[name])
        assert bf16[name] > 2 * fp16[name], (name, bf16[name], fp16[name])
        assert fp32[name] < 1e-5, (name, fp32[name])


def test_matched_lse_is_close_to_reference():
    q, k, v, _ = make_inputs(seed=9, sq=64, sk=64, d=32, dtype=torch.bfloat16)
    _, lse_ref = attention_forward(q, k, v, causal=True)
    _, lse = attention_forward(q, k, v, causal=True, precision=MATCHED)
    assert lse.dtype == torch.float32
    assert max_err(lse, lse_ref) < 1e-5


def test_precisions_are_declarative_and_frozen():
    assert REFERENCE.accumulate_dtype == torch.float64 and not REFERENCE.round_p_and_ds
    assert MATCHED.accumulate_dtype == torch.float32 and MATCHED.round_p_and_ds
    assert MATCHED.output_dtype_for(torch.bfloat16) == torch.bfloat16
    assert REFERENCE.output_dtype_for(torch.bfloat16) == torch.float64
    with pytest.raises(Exception):
        MATCHED.round_p_and_ds = False  # frozen dataclass
    assert isinstance(MATCHED, Precision)


def test_tf32_guard_disables_and_restores_legacy_flag():
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    try:
        matmul.allow_tf32 = True
        with ieee_fp32_matmul():
            assert matmul.allow_tf32 is False
        assert matmul.allow_tf32 is True
    finally:
        matmul.allow_tf32 = saved


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
                    reason="torch without the fp32_precision API")
def test_tf32_guard_respects_new_precision_api():
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"  # now reading the legacy flag raises in torch >= 2.9
        with ieee_fp32_matmul():
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = saved


# ---------------------------------------------------------------------------------------------
# argument validation


def _fwd_error(match, **overrides):
    q, k, v, _ = make_inputs(seed=10)
    args = dict(q=q, k=k, v=v)
    args.update(overrides)
    with pytest.raises(ValueError, match=match):
        attention_forward(args["q"], args["k"], args["v"], **{
            key: val for key, val in overrides.items() if key not in ("q", "k", "v")})


def test_forward_argument_validation():
    q, k, v, _ = make_inputs(seed=10)
    _fwd_error(r"q must have rank 4", q=q[0])
    _fwd_error(r"k must have rank 4", k=k[0])
    _fwd_error(r"v batch size 1 does not match q batch size 2", v=v[:1])
    _fwd_error(r"k head_dim 8 does not match q head_dim 16", k=k[..., :8])
    _fwd_error(r"H=4 must be a multiple of k/v heads Hkv=3",
               k=torch.zeros(2, 3, 32, 16, dtype=torch.float64),
               v=torch.zeros(2, 3, 32, 16, dtype=torch.float64))
    _fwd_error(r"k has 2 heads but v has 1", v=v[:, :1])
    _fwd_error(r"k sequence length \(Sk\) 32 does not match v's 31", v=v[:, :, :31])
    _fwd_error(r"v dtype torch.float32 does not match q dtype torch.float64", v=v.float())
    _fwd_error(r"q must be float8_e4m3fn, float8_e5m2, float16, bfloat16, float32 or float64", q=q.to(torch.int32))
    _fwd_error(r"max_chunk_bytes must be a positive int", max_chunk_bytes=0)
    _fwd_error(r"sm_scale must be finite", sm_scale=float("nan"))
    with pytest.raises(TypeError, match=r"precision must be a reference.Precision"):
        attention_forward(q, k, v, precision="matched")
    with pytest.raises(TypeError, match=r"k must be a torch.Tensor"):
        attention_forward(q, k.numpy(), v)


def test_backward_argument_validation():
    q, k, v, do = make_inputs(seed=11)
    out, lse = attention_forward(q, k, v)
    with pytest.raises(ValueError, match=r"do shape \(2, 4, 31, 16\) does not match q shape"):
        attention_backward(q, k, v, out, do[:, :, :31], lse)
    with pytest.raises(ValueError, match=r"out shape .* does not match q shape"):
        attention_backward(q, k, v, out[:, :2], do, lse)
    with pytest.raises(ValueError, match=r"lse must have rank 3"):
        attention_backward(q, k, v, out, do, lse[..., None])
    with pytest.raises(ValueError, match=r"lse shape \(2, 4, 31\) does not match"):
        attention_backward(q, k, v, out, do, lse[..., :31])
