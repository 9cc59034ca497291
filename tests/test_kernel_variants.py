"""FlashAttention-2's variants in the bundled kernels -- sliding window, softcap, ALiBi,
variable-length (packed) batches, and dropout with each -- forward and gradients, on
the interpreter, against a float64 reference written here, by the repository's rule:
the kernel's error at most twice that of a same-precision torch path (the reference's
own formulas in fp32, rounded where a fused kernel rounds), or of the floor of a few
roundings at the result's magnitude (conformance.judging.rule)."""

import math

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import tuning  # noqa: E402
from conformance.judging.rule import compare_tensor  # noqa: E402

DEVICE = PROFILE.device
DTYPE_NAME = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
FP16, BF16, FP32 = torch.float16, torch.bfloat16, torch.float32


# ----------------------------------------------------------------------------- the reference

def visibility(seq_q, seq_k, causal=False, window=None):
    """bool (Sq, Sk): FlashAttention-2's bottom-right aligned window, causal = right 0."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    rows = torch.arange(seq_q)[:, None]
    cols = torch.arange(seq_k)[None, :]
    diagonal = rows + seq_k - seq_q
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool)
    if left >= 0:
        mask &= cols >= diagonal - left
    if right >= 0:
        mask &= cols <= diagonal + right
    return mask


def scores_of(q, k, scale, softcap=None, slopes=None):
    """(scores, d scores / d (scale q.k)) of (B, H, Sq, D) q and kv-head-repeated k."""
    x = q @ k.transpose(-1, -2) * scale
    slope = torch.ones_like(x)
    if softcap is not None:
        tanh = torch.tanh(x / softcap)
        x, slope = softcap * tanh, 1 - tanh * tanh
    if slopes is not None:
        seq_q, seq_k = q.shape[2], k.shape[2]
        distance = (torch.arange(seq_q)[:, None] + seq_k - seq_q - torch.arange(seq_k)[None, :]).abs()
        x = x - slopes.to(x.dtype).expand(q.shape[0], q.shape[1])[..., None, None] * distance.to(x.dtype)
    return x, slope


def reference(q, k, v, do, causal=False, window=None, softcap=None, alibi=None, keep=None, p=0.0,
              exact=True):
    """out, lse, dq, dk, dv of dense (B, H, S, D) inputs: float64 (exact), or the same-precision
    torch path: fp32 arithmetic on the inputs, P, dS and the results rounded to their dtype
    where a fused kernel rounds them.  keep: the dropout keep mask (B, H, Sq, Sk) or None."""
    work = torch.float64 if exact else torch.float32
    low = (lambda t: t) if exact else (lambda t: t.to(q.dtype).to(work))
    batch, heads, seq_q, head_dim = q.shape
    group = heads // k.shape[1]
    qf, kf, vf, dof = (t.to(work) for t in (q, k, v, do))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    scale = head_dim ** -0.5
    s, cap_slope = scores_of(qf, kf, scale, softcap, alibi)
    mask = visibility(seq_q, k.shape[2], causal, window)
    empty = ~mask.any(-1)
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s.masked_fill(empty[:, None], 0.0), -1).masked_fill(empty, -math.inf)
    probs = torch.exp(s - lse.masked_fill(empty, math.inf)[..., None])
    keep_scale = 1.0 / (1.0 - p)
    dropped = probs if keep is None else probs * keep
    used = low(dropped)
    out = low(used @ vf * (keep_scale if keep is not None else 1.0))
    # The backward as FlashAttention-2 computes it, delta from the stored output.
    delta = (dof * out).sum(-1, keepdim=True)
    dp = dof @ vf.transpose(-1, -2)
    if keep is not None:
        dp = dp * keep * keep_scale
    ds = low(probs * (dp - delta) * cap_slope)
    dq = ds @ kf * scale
    dk = (ds.transpose(-1, -2) @ qf * scale).unflatten(1, (-1, group)).sum(2)
    dv = (used.transpose(-1, -2) @ dof * (keep_scale if keep is not None else 1.0)).unflatten(1, (-1, group)).sum(2)
    results = dict(out=out, lse=lse.to(torch.float32) if not exact else lse, dq=dq, dk=dk, dv=dv)
    if not exact:
        results = {name: t if name == "lse" else t.to(q.dtype) for name, t in results.items()}
    return results


def total_of(q, k, causal=False, window=None, softcap=None, alibi=None, exact=True):
    """sum_i P_ij (B, H, Sk) of the un-dropped weights (fp32 arithmetic unless exact)."""
    work = torch.float64 if exact else torch.float32
    group = q.shape[1] // k.shape[1]
    s, _ = scores_of(q.to(work), k.to(work).repeat_interleave(group, 1), q.shape[-1] ** -0.5, softcap, alibi)
    s = s.masked_fill(~visibility(q.shape[2], k.shape[2], causal, window), -math.inf)
    probs = torch.softmax(s, -1).nan_to_num(0.0)  # rows that see no key: NaN -> 0
    return probs.sum(2).to(torch.float32) if not exact else probs.sum(2)


def score_size(q, k, alibi, seq_q, seq_k):
    """The size fp32 rounds lse's terms at: scale max|q| max|k| (2-norms) plus the largest
    ALiBi bias (slope x the longest distance)."""
    norms = [t.double().norm(dim=-1).max().item() for t in (q, k)]
    bias = 0.0 if alibi is None else alibi.abs().max().item() * (seq_q + seq_k)
    return q.shape[-1] ** -0.5 * norms[0] * norms[1] + bias


def assert_rule(kernel: dict, matched: dict, ref: dict, dtype, term_size: float) -> None:
    """Every tensor by the 2x rule (conformance.judging.rule): lse and total as fp32 values
    made from the scores' exponentials (their terms' size), the rest in the input dtype."""
    failed = {}
    for name in ref:
        fp32_stat = name in ("lse", "total")
        record = compare_tensor(name, kernel[name], matched[name], ref[name],
                                "fp32" if fp32_stat else DTYPE_NAME[dtype], term_size=term_size if fp32_stat else 0.0)
        if not record["passed"] or record["nonfinite"]:
            failed[name] = (record["ratio"], record["kernel_err"], record["torch_err"], record["floor"])
    assert not failed, f"2x rule broken (ratio, kernel_err, torch_err, floor): {failed}"


def draw(shape, generator, dtype, scale=1.0):
    return (torch.randn(shape, generator=generator) * scale).to(dtype=dtype, device=DEVICE)


def kernel_dense(q, k, v, do, **options):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse = kernels.flash_attention(*leaves, return_log_normalizer=True, **options)
    dq, dk, dv = torch.autograd.grad(out, leaves, do)
    return dict(out=out.detach(), lse=lse, dq=dq, dk=dk, dv=dv)


def dense_keep(seed, p, q, k):
    """The kernels' dropout mask of a dense problem, (B, H, Sq, Sk)."""
    batch, heads, seq_q, _ = q.shape
    mask = kernels.dropout_keep_mask(seed, p, batch, heads, seq_q, k.shape[2], device=DEVICE)
    return mask.view(batch, heads, seq_q, k.shape[2]).cpu()


def test_the_references_gradients_are_autograds():
    """The float64 reference's hand-written backward (FlashAttention-2's formulas, dropout and
    softcap included) is the derivative of its forward."""
    gen = torch.Generator().manual_seed(1)
    q, do = draw((2, 4, 9, 8), gen, torch.float64), draw((2, 4, 9, 8), gen, torch.float64)
    k, v = draw((2, 2, 13, 8), gen, torch.float64, 3.0), draw((2, 2, 13, 8), gen, torch.float64)
    keep = torch.rand(2, 4, 9, 13, generator=gen) > 0.3
    options = dict(causal=True, window=(3, -1), softcap=2.0, alibi=torch.tensor([[0.5, 0.1, 0.2, 0.3]] * 2),
                   keep=keep, p=0.3)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(reference(*leaves, do, **options)["out"], leaves, do)
    got = reference(q, k, v, do, **options)
    for name, expected in zip(("dq", "dk", "dv"), want):
        assert (got[name] - expected).abs().max().item() < 1e-12, name


# ----------------------------------------------------------------------------- dense variants

# (dtype, B, H, Hkv, Sq, Sk, D, options): tile boundaries (64 rows and keys on the interpreter)
# both ways, Sq != Sk both ways, rows that see no key, every variant alone and together.
DENSE_CASES = {
    "window-fp16": (FP16, 1, 2, 1, 70, 70, 32, dict(window_size=(8, 4))),
    "window00-bf16": (BF16, 1, 2, 2, 40, 70, 16, dict(window_size=(0, 0))),
    "window-causal-emptyrows-fp32": (FP32, 1, 2, 1, 70, 33, 16, dict(window_size=(10, -1), causal=True)),
    "window-right-only-fp16": (FP16, 2, 2, 1, 33, 70, 32, dict(window_size=(-1, 3))),
    "window-emptyrows-bf16": (BF16, 1, 2, 2, 70, 20, 32, dict(window_size=(3, 1))),
    "softcap-bigscores-bf16": (BF16, 1, 2, 1, 65, 65, 32, dict(softcap=5.0, causal=True)),
    "alibi-heads-gqa-fp16": (FP16, 2, 2, 1, 50, 70, 16, dict(alibi_slopes="H")),
    "alibi-batchheads-gqa-bf16": (BF16, 2, 2, 1, 70, 50, 32, dict(alibi_slopes="BH", causal=True)),
    "everything-fp32": (FP32, 2, 2, 1, 67, 45, 16, dict(window_size=(20, 6), softcap=3.0, alibi_slopes="BH")),
    "everything-dropout-fp16": (FP16, 1, 2, 1, 70, 66, 32,
                                dict(window_size=(30, 2), softcap=8.0, alibi_slopes="H", dropout_p=0.25)),
}
INPUT_SCALE = {"softcap-bigscores-bf16": 3.0}  # scores up to ~ +-40 before the cap of 5


def alibi_slopes(kind, batch, heads, generator):
    if kind is None:
        return None
    shape = (heads,) if kind == "H" else (batch, heads)
    return (torch.rand(shape, generator=generator) * 0.5 + 0.05).to(DEVICE)


def dense_case(name, seed=0):
    dtype, batch, heads, kv_heads, seq_q, seq_k, head_dim, options = DENSE_CASES[name]
    gen = torch.Generator().manual_seed(seed + seq_q * 100 + seq_k)
    scale = INPUT_SCALE.get(name, 1.0)
    q = draw((batch, heads, seq_q, head_dim), gen, dtype, scale)
    k, v = (draw((batch, kv_heads, seq_k, head_dim), gen, dtype, scale if i == 0 else 1.0) for i in range(2))
    do = draw((batch, heads, seq_q, head_dim), gen, dtype)
    options = dict(options, alibi_slopes=alibi_slopes(options.get("alibi_slopes"), batch, heads, gen))
    return q, k, v, do, options


def reference_options(options, keep=None):
    return dict(causal=options.get("causal", False), window=options.get("window_size"),
                softcap=options.get("softcap"), alibi=options.get("alibi_slopes"), keep=keep,
                p=options.get("dropout_p", 0.0))


@pytest.mark.parametrize("name", DENSE_CASES)
def test_dense_variant_forward_and_gradients_follow_the_rule(name):
    q, k, v, do, options = dense_case(name)
    seed = 1234
    kernel = kernel_dense(q, k, v, do, dropout_seed=seed, **options)
    keep = dense_keep(seed, options["dropout_p"], q, k) if options.get("dropout_p") else None
    inputs = [t.cpu() for t in (q, k, v, do)]
    ref = reference(*inputs, **reference_options(options, keep))
    matched = reference(*inputs, **reference_options(options, keep), exact=False)
    assert_rule(kernel, matched, ref, q.dtype, score_size(*inputs[:2], options["alibi_slopes"], q.shape[2], k.shape[2]))
    empty = ~visibility(q.shape[2], k.shape[2], options.get("causal", False), options.get("window_size")).any(-1)
    assert torch.isneginf(kernel["lse"][..., empty]).all() and not kernel["out"][..., empty, :].any()


def test_softcap_with_large_logits_saturates_as_the_reference():
    """Scores far beyond the cap (x30): tanh saturates at +-1 (1 - tanh^2 underflows); the
    kernel stays finite and by the rule."""
    q, k, v, do, options = dense_case("softcap-bigscores-bf16")
    q = (q.float() * 10).to(BF16)
    kernel = kernel_dense(q, k, v, do, **options)
    inputs = [t.cpu() for t in (q, k, v, do)]
    ref, matched = (reference(*inputs, **reference_options(options), exact=exact) for exact in (True, False))
    assert all(torch.isfinite(t).all() for t in kernel.values())
    assert_rule(kernel, matched, ref, q.dtype, score_size(*inputs[:2], None, 65, 65))


@pytest.mark.parametrize("dtype", [FP16, FP32], ids=DTYPE_NAME.get)
def test_wide_band_with_small_tiles_runs_unmasked_tiles(monkeypatch, dtype):
    """16 x 16 tiles, so a band of 40 keys holds whole tiles every row of a tile sees: the
    unmasked span of every kernel (and the ragged tiles next to it) runs, against the rule."""
    for kernel_name in ("fwd", "bwd_dkdv", "bwd_dq", "total"):
        monkeypatch.setitem(tuning.OVERRIDES, kernel_name, tuning.LaunchConfig(16, 16))
    gen = torch.Generator().manual_seed(7)
    q, do = draw((1, 2, 70, 16), gen, dtype), draw((1, 2, 70, 16), gen, dtype)
    k, v = draw((1, 1, 61, 16), gen, dtype), draw((1, 1, 61, 16), gen, dtype)
    options = dict(window_size=(40, 25), alibi_slopes=torch.tensor([0.02, 0.3]))
    kernel = kernel_dense(q, k, v, do, **options)
    kernel["total"] = kernels.flash_attention(q, k, v, return_total_attention=True, **options)[1]
    ref_options = reference_options(options)
    ref, matched = (reference(q, k, v, do, **ref_options, exact=exact) for exact in (True, False))
    ref["total"], matched["total"] = (total_of(q, k, window=(40, 25), alibi=options["alibi_slopes"], exact=exact)
                                      for exact in (True, False))
    assert_rule(kernel, matched, ref, dtype, score_size(q, k, options["alibi_slopes"], 70, 61))


@pytest.mark.parametrize("dtype", [FP16, BF16, FP32], ids=DTYPE_NAME.get)
def test_total_attention_of_the_variants(dtype):
    """total[b, h, j] = sum_i P_ij of the P the options define (window, cap, ALiBi)."""
    gen = torch.Generator().manual_seed(3)
    q, k = draw((2, 2, 70, 32), gen, dtype), draw((2, 1, 45, 32), gen, dtype)
    slopes = torch.tensor([[0.1, 0.4], [0.25, 0.05]])
    options = dict(causal=True, window=(12, 0), softcap=4.0, alibi=slopes)
    _, total = kernels.flash_attention(q, k, k, causal=True, window_size=(12, -1), softcap=4.0,
                                       alibi_slopes=slopes, return_total_attention=True)
    ref, matched = (total_of(q, k, **options, exact=exact) for exact in (True, False))
    assert_rule({"total": total}, {"total": matched}, {"total": ref}, dtype, score_size(q, k, slopes, 70, 45))


def test_options_that_mean_no_variant_run_the_plain_kernels():
    """No window, (-1, -1), and (-1, 0) (= causal) or causal with (-1, -1): the plain
    kernels, bit for bit; a window that reaches past every key equals no window."""
    gen = torch.Generator().manual_seed(5)
    q, do = draw((1, 2, 37, 16), gen, FP16), draw((1, 2, 37, 16), gen, FP16)
    k, v = draw((1, 1, 50, 16), gen, FP16), draw((1, 1, 50, 16), gen, FP16)
    plain, causal = kernel_dense(q, k, v, do), kernel_dense(q, k, v, do, causal=True)
    same = [(plain, dict(window_size=(-1, -1))), (causal, dict(window_size=(-1, 0))),
            (causal, dict(window_size=(-1, -1), causal=True)), (causal, dict(window_size=(-1, 5), causal=True))]
    for expected, options in same:
        got = kernel_dense(q, k, v, do, **options)
        assert all(torch.equal(got[name], expected[name]) for name in expected), options
    wide = kernel_dense(q, k, v, do, window_size=(1000, 1000))
    ref, matched = (reference(q, k, v, do, exact=exact) for exact in (True, False))
    assert_rule(wide, matched, ref, FP16, score_size(q, k, None, 37, 50))
