"""reference/variants.py in the chunked reference: window, softcap, ALiBi and per-sequence
lengths against a naive float64 formula (dense, autograd), chunking invariance, the
same-precision path's accuracy, and argument checks."""

import math

import pytest
import torch

from conformance.bundled.reference import (MATCHED, REFERENCE, attention_backward, attention_delta_noise,
                                           attention_forward)
from tests.test_reference import make_inputs, max_err

F64_TOL = 1e-10


def naive(q, k, v, causal, window=None, softcap=None, slopes=None, lengths=None):
    """Dense float64 formula of FlashAttention-2's variants, written from the definition:
    per batch b, off = Sk_b - Sq_b; visible iff causal j <= i + off, i + off - left <= j <=
    i + off + right, j < Sk_b, i < Sq_b; s = c tanh(scale q.k / c) - slope |i + off - j|.
    Rows that see no key: out 0, lse -inf."""
    batch, heads, sq, d = q.shape
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq).view(1, 1, sq, 1)
    j = torch.arange(k.shape[2]).view(1, 1, 1, -1)
    len_q, len_k = lengths if lengths is not None else ([sq] * batch, [k.shape[2]] * batch)
    len_q, len_k = (torch.tensor(x).view(batch, 1, 1, 1) for x in (len_q, len_k))
    position = i + len_k - len_q
    if slopes is not None:
        s = s - slopes.double().expand(batch, heads).view(batch, heads, 1, 1) * (position - j).abs()
    visible = (j < len_k) & (i < len_q)
    if causal:
        visible &= j <= position
    if window is not None:
        left, right = window
        if left >= 0:
            visible &= j >= position - left
        if right >= 0:
            visible &= j <= position + right
    visible = visible.expand(s.shape)
    empty = ~visible.any(dim=-1, keepdim=True)
    s = s.masked_fill(~visible, float("-inf")).masked_fill(empty, 0.0)
    p = torch.softmax(s, dim=-1) * ~empty
    lse = torch.logsumexp(s, dim=-1).masked_fill(empty[..., 0], float("-inf"))
    return p @ v, lse


def oracle(q, k, v, do, causal, **variants):
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    out, lse = naive(q, k, v, causal, **variants)
    return (out.detach(), lse.detach()) + torch.autograd.grad(out, (q, k, v), do.double())


def run(q, k, v, do, causal, precision=REFERENCE, **kw):
    out, lse = attention_forward(q, k, v, causal=causal, precision=precision, **kw)
    return (out, lse) + attention_backward(q, k, v, out, do, lse, causal=causal, precision=precision, **kw)


def reference_kwargs(window=None, softcap=None, slopes=None, lengths=None):
    return dict(window=window, softcap=softcap, alibi_slopes=slopes, seq_lens=lengths)


SLOPES_H = torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8], dtype=torch.float32)
SLOPES_BH = torch.stack([SLOPES_H, SLOPES_H.roll(1)])
VARIANTS = {
    "window left only": dict(window=(5, -1)),
    "window right only": dict(window=(-1, 3)),
    "window (0, 0)": dict(window=(0, 0)),
    "window (7, 2)": dict(window=(7, 2)),
    "softcap": dict(softcap=2.0),
    "alibi (H,)": dict(slopes=SLOPES_H),
    "alibi (B, H)": dict(slopes=SLOPES_BH),
    "lengths": dict(lengths=([17, 0], [0, 23])),
    "lengths mixed": dict(lengths=([1, 30], [31, 1])),
    "everything": dict(window=(6, 1), softcap=3.0, slopes=SLOPES_BH, lengths=([20, 9], [31, 12])),
}


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq, sk", [(30, 31), (31, 19)])
def test_each_variant_matches_the_naive_formula(name, causal, sq, sk):
    variants = dict(VARIANTS[name])
    if "lengths" in variants:  # lengths must fit the padded sizes
        variants["lengths"] = tuple([min(x, limit) for x in xs] for xs, limit in zip(variants["lengths"], (sq, sk)))
    q, k, v, do = make_inputs(0, b=2, h=4, hkv=2, sq=sq, sk=sk, d=8)
    expected = oracle(q, k, v, do, causal, **variants)
    got = run(q, k, v, do, causal, **reference_kwargs(**variants))
    for name_, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, expected):
        assert max_err(a, b) < F64_TOL, name_


def test_a_causal_window_is_the_window_with_right_clipped_to_zero():
    q, k, v, do = make_inputs(1, sq=24, sk=40, d=8)
    clipped = run(q, k, v, do, False, window=(9, 0))
    causal = run(q, k, v, do, True, window=(9, 5))
    assert all(max_err(a, b) == 0 for a, b in zip(clipped, causal))


def test_padding_is_rows_that_see_no_key():
    q, k, v, do = make_inputs(2, b=2, h=2, hkv=1, sq=16, sk=20, d=8)
    out, lse, dq, dk, dv = run(q, k, v, do, True, seq_lens=([10, 16], [20, 7]))
    assert (out[0, :, 10:] == 0).all() and (lse[0, :, 10:] == float("-inf")).all() and (dq[0, :, 10:] == 0).all()
    assert (dk[1, :, 7:] == 0).all() and (dv[1, :, 7:] == 0).all()


@pytest.mark.parametrize("window, causal", [((4, 0), True), ((3, 3), False), (None, True)])
@pytest.mark.parametrize("max_chunk_bytes", [1, 4096])
def test_chunks_that_skip_unseen_keys_do_not_change_the_result(window, causal, max_chunk_bytes):
    q, k, v, do = make_inputs(3, sq=40, sk=64, d=8)
    kw = dict(window=window, softcap=5.0, alibi_slopes=SLOPES_H, seq_lens=([33, 40], [64, 50]))
    whole = run(q, k, v, do, causal, **kw)
    chunked = run(q, k, v, do, causal, max_chunk_bytes=max_chunk_bytes, **kw)
    assert all(max_err(a, b) < F64_TOL for a, b in zip(whole, chunked))


@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, 5e-3), (torch.bfloat16, 4e-2), (torch.float32, 1e-5)])
def test_matched_softcap_and_alibi_stay_within_their_dtype(dtype, tolerance):
    """The same-precision path computes tanh and the bias in fp32: off the reference by the
    input dtype's rounding, not more."""
    q, k, v, do = (x.to(dtype) for x in make_inputs(4, sq=48, sk=64, d=16, dtype=torch.float32))
    q, k = q * 4, k * 4  # logits beyond the cap
    kw = dict(window=(20, 3), softcap=8.0, alibi_slopes=SLOPES_H, seq_lens=([40, 48], [64, 1]))
    reference = run(q, k, v, do, True, **kw)
    matched = run(q, k, v, do, True, precision=MATCHED, **kw)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), matched, reference):
        scale = b[torch.isfinite(b)].abs().max().item()
        assert max_err(a, b) <= tolerance * max(scale, 1.0), name
    assert matched[1].dtype == torch.float32 and matched[0].dtype == dtype


def test_softcap_gradient_carries_the_tanh_derivative():
    """At huge logits every score is capped flat: the gradients through the scores vanish."""
    q, k, v, do = make_inputs(5, sq=8, sk=8, d=4)
    _, _, dq, dk, _ = run(q * 1e4, k, v, do, False, softcap=1.0)
    assert dq.abs().max() < 1e-6 and dk.abs().max() < 1e-2


def test_delta_noise_takes_the_variants():
    """The noise travels through the variant's P (and the softcap's derivative): one key per
    row (window (0, 0)) or a flat cap change it."""
    q, k, v, do = (x.float() for x in make_inputs(6, sq=16, sk=16, d=8))

    def noise(**kw):
        out, lse = attention_forward(q, k, v, **kw)
        return attention_delta_noise(q, k, v, out, do, lse, **kw).stored_output["dq"]

    plain = noise()
    assert noise(window=(0, 0)) != plain
    assert noise(softcap=0.5) < plain  # the derivative 1 - tanh^2 <= 1 shrinks it


@pytest.mark.parametrize("kw, words", [
    (dict(window=(1,)), "window: expected (left, right)"),
    (dict(window=(-2, 0)), "window: expected (left, right)"),
    (dict(softcap=-1.0), "softcap: expected a finite number >= 0"),
    (dict(softcap=float("nan")), "softcap: expected a finite number >= 0"),
    (dict(alibi_slopes=torch.ones(3)), "alibi_slopes: expected shape (4,) or (2, 4)"),
    (dict(seq_lens=([1, 2, 3], [1, 2])), "seq_lens: query lengths must be 2 integers"),
    (dict(seq_lens=([1, 99], [1, 2])), "seq_lens: query lengths must lie in [0, 32]"),
    (dict(seq_lens=([1, 2], [-1, 2])), "seq_lens: key lengths must lie in [0, 32]"),
])
def test_variant_arguments_are_checked(kw, words):
    q, k, v, _ = make_inputs(7, b=2, h=4, hkv=2, sq=32, sk=32, d=8)
    with pytest.raises((ValueError, TypeError)) as raised:
        attention_forward(q, k, v, **kw)
    assert words in str(raised.value)
