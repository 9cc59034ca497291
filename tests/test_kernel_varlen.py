"""flash_attention_varlen on the interpreter: each packed sequence is the dense operator's
problem on that sequence alone (its own bottom-right causal and window alignment, ALiBi
distances, dropout mask coordinates), judged per sequence against the float64 reference
of tests/test_kernel_variants.py by the 2x rule; a batch of equal lengths is the dense
batch bit for bit."""

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import flash as flash_module  # noqa: E402
from test_kernel_variants import (  # noqa: E402
    BF16, FP16, FP32, assert_rule, draw, kernel_dense, reference, score_size, visibility,
)

DEVICE = PROFILE.device


def packed(lengths_q, lengths_k, heads, kv_heads, head_dim, dtype, seed):
    """q, k, v, do packed (tokens, heads, D), and the int32 cumulative lengths."""
    gen = torch.Generator().manual_seed(seed)
    total_q, total_k = sum(lengths_q), sum(lengths_k)
    q, do = draw((total_q, heads, head_dim), gen, dtype), draw((total_q, heads, head_dim), gen, dtype)
    k, v = draw((total_k, kv_heads, head_dim), gen, dtype), draw((total_k, kv_heads, head_dim), gen, dtype)
    cumulative = lambda lengths: torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()],
                                              dtype=torch.int32, device=DEVICE)
    return q, k, v, do, cumulative(lengths_q), cumulative(lengths_k)


def kernel_varlen(q, k, v, do, cu_q, cu_k, max_q, max_k, **options):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, lse = kernels.flash_attention_varlen(*leaves, cu_q, cu_k, max_q, max_k, return_log_normalizer=True,
                                              **options)
    grads = torch.autograd.grad(out, leaves, do) if out.numel() else [torch.zeros_like(t) for t in leaves]
    return dict(out=out.detach(), lse=lse, dq=grads[0], dk=grads[1], dv=grads[2])


def varlen_reference(q, k, v, do, cu_q, cu_k, max_q, max_k, exact, causal=False, window_size=None,
                     softcap=None, alibi_slopes=None, dropout_p=0.0, dropout_seed=None):
    """The dense reference per sequence (batch 1), packed back: lse as (H, total_q)."""
    batch, heads = len(cu_q) - 1, q.shape[1]
    parts = {name: [] for name in ("out", "lse", "dq", "dk", "dv")}
    for b in range(batch):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        seq = [t[span].transpose(0, 1).unsqueeze(0).cpu() for t, span in ((q, rows), (k, keys), (v, keys), (do, rows))]
        seq_q, seq_k = seq[0].shape[2], seq[1].shape[2]
        slopes = None if alibi_slopes is None else (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b])
        keep = None
        if dropout_p:
            keep = kernels.dropout_keep_mask(dropout_seed, dropout_p, batch, heads, max_q, max_k, device=DEVICE,
                                             batch_heads=(b * heads, (b + 1) * heads), rows=(0, seq_q),
                                             keys=(0, seq_k)).unsqueeze(0).cpu()
        results = reference(*seq, causal=causal, window=window_size, softcap=softcap,
                            alibi=None if slopes is None else slopes.cpu(), keep=keep, p=dropout_p, exact=exact)
        for name, t in results.items():
            parts[name].append(t[0] if name == "lse" else t[0].transpose(0, 1))
    return {name: torch.cat(ts, dim=1 if name == "lse" else 0) for name, ts in parts.items()}


# (lengths of q, lengths of k, dtype, H, Hkv, D, options): a zero-length and a one-token
# sequence, lengths past a 64-row tile, Sq > Sk and Sq < Sk within one batch.
VARLEN_CASES = {
    "plain-fp16": ([0, 1, 5, 33, 64], [3, 1, 9, 33, 70], FP16, 2, 1, 32, {}),
    "causal-window-bf16": ([0, 1, 5, 33, 64], [4, 0, 5, 20, 66], BF16, 2, 2, 16,
                           dict(causal=True, window_size=(16, -1))),
    "window-both-sides-fp32": ([7, 0, 65, 1], [70, 2, 40, 1], FP32, 2, 1, 16, dict(window_size=(5, 9))),
    "softcap-alibi-gqa-fp32": ([0, 1, 5, 33, 64], [3, 1, 9, 33, 70], FP32, 4, 2, 16,
                               dict(causal=True, softcap=6.0, alibi_slopes="BH")),
    "dropout-alibi-fp16": ([0, 1, 5, 33, 64], [2, 3, 5, 40, 64], FP16, 2, 1, 32,
                           dict(dropout_p=0.3, dropout_seed=99, alibi_slopes="H", window_size=(24, 8))),
    "dropout-causal-bf16": ([17, 64, 2], [30, 50, 2], BF16, 2, 2, 32, dict(dropout_p=0.2, dropout_seed=7,
                                                                            causal=True)),
}


@pytest.mark.parametrize("name", VARLEN_CASES)
def test_varlen_forward_and_gradients_follow_the_rule_per_sequence(name):
    lengths_q, lengths_k, dtype, heads, kv_heads, head_dim, options = VARLEN_CASES[name]
    q, k, v, do, cu_q, cu_k = packed(lengths_q, lengths_k, heads, kv_heads, head_dim, dtype, seed=len(name))
    batch = len(lengths_q)
    if "alibi_slopes" in options:
        shape = (heads,) if options["alibi_slopes"] == "H" else (batch, heads)
        options = dict(options, alibi_slopes=torch.rand(shape, generator=torch.Generator().manual_seed(2)) * 0.5)
    max_q, max_k = max(lengths_q) + 3, max(lengths_k)  # a bound above the longest is valid
    kernel = kernel_varlen(q, k, v, do, cu_q, cu_k, max_q, max_k, **options)
    offsets = (cu_q.tolist(), cu_k.tolist())
    ref, matched = (varlen_reference(q, k, v, do, *offsets, max_q, max_k, exact, **options) for exact in (True, False))
    assert kernel["lse"].shape == (heads, sum(lengths_q)) and kernel["out"].shape == q.shape
    assert_rule(kernel, matched, ref, dtype, score_size(q, k, options.get("alibi_slopes"), max_q, max_k))


def test_an_equal_length_batch_is_the_dense_batch_bit_for_bit():
    """Sequences of one length: the packed run is the dense (B, H, S, D) run, dropout mask,
    window, cap and ALiBi included; only the layout of lse differs ((H, B*S) against (B, H, S))."""
    gen = torch.Generator().manual_seed(11)
    batch, heads, seq_q, seq_k = 3, 2, 37, 45
    q, do = draw((batch, heads, seq_q, 16), gen, FP16), draw((batch, heads, seq_q, 16), gen, FP16)
    k, v = draw((batch, 1, seq_k, 16), gen, FP16), draw((batch, 1, seq_k, 16), gen, FP16)
    options = dict(causal=True, window_size=(9, -1), softcap=4.0, alibi_slopes=torch.tensor([[0.1, 0.3]] * 3),
                   dropout_p=0.25, dropout_seed=5)
    dense = kernel_dense(q, k, v, do, **options)
    pack = lambda t: t.transpose(1, 2).reshape(-1, t.shape[1], t.shape[3])
    cu_q = torch.arange(0, batch + 1, dtype=torch.int32) * seq_q
    cu_k = torch.arange(0, batch + 1, dtype=torch.int32) * seq_k
    varlen = kernel_varlen(pack(q), pack(k), pack(v), pack(do), cu_q, cu_k, seq_q, seq_k, **options)
    for name in ("out", "dq", "dk", "dv"):
        assert torch.equal(varlen[name], pack(dense[name])), name
    assert torch.equal(varlen["lse"], dense["lse"].transpose(0, 1).reshape(heads, -1))


def test_zero_length_sequences_and_empty_batches():
    q, k, v, do, cu_q, cu_k = packed([0, 3, 0], [4, 0, 0], 2, 1, 16, FP32, seed=1)
    with kernels.poisoned_outputs():
        got = kernel_varlen(q, k, v, do, cu_q, cu_k, 3, 4, causal=True)
    assert not got["out"].any() and torch.isneginf(got["lse"]).all()  # the 3 rows see no key
    assert not got["dq"].any() and not got["dk"].any() and not got["dv"].any()
    q, k, v, do, cu_q, cu_k = packed([0, 0], [0, 0], 2, 1, 16, FP16, seed=2)
    out, lse = kernels.flash_attention_varlen(q, k, v, cu_q, cu_k, 0, 0, return_log_normalizer=True)
    assert out.shape == (0, 2, 16) and lse.shape == (2, 0)


def test_without_a_tile_list_the_grid_over_the_longest_sequence_gives_the_same_bits(monkeypatch):
    """Under CUDA graph capture no tile list is made (kernels.packed_tiles) and the launches
    take one program per (tile, sequence x head) over the longest sequence: the same results,
    bit for bit, as the list's one program per tile that holds tokens."""
    q, k, v, do, cu_q, cu_k = packed([0, 1, 5, 70, 33], [5, 1, 0, 66, 40], 4, 2, 32, FP16, seed=4)
    options = dict(causal=True, window_size=(10, -1), dropout_p=0.25, dropout_seed=3)
    listed = kernel_varlen(q, k, v, do, cu_q, cu_k, 70, 66, **options)
    asked = []
    monkeypatch.setattr(flash_module, "tile_list", lambda *args, **kwargs: asked.append(args))  # None: no list
    with kernels.poisoned_outputs():
        gridded = kernel_varlen(q, k, v, do, cu_q, cu_k, 70, 66, **options)
    assert len(asked) == 4  # the forward, delta, dK/dV and dQ launches each asked
    for name, tensor in listed.items():
        assert torch.equal(tensor, gridded[name]), name


def test_every_varlen_output_element_is_written():
    q, k, v, do, cu_q, cu_k = packed([0, 1, 5, 70, 33], [5, 1, 0, 66, 40], 4, 2, 32, BF16, seed=3)
    with kernels.poisoned_outputs():
        got = kernel_varlen(q, k, v, do, cu_q, cu_k, 70, 66, window_size=(10, 3))
    assert all(not t.isnan().any() for t in got.values())
    empty = torch.cat([~visibility(sq, sk, window=(10, 3)).any(-1) for sq, sk in
                       zip([0, 1, 5, 70, 33], [5, 1, 0, 66, 40])])
    assert torch.isneginf(got["lse"][:, empty]).all() and not torch.isinf(got["lse"][:, ~empty]).any()


def test_varlen_carries_the_dense_operators_dropout_replay():
    assert kernels.flash_attention_varlen.dropout_keep_mask is kernels.flash_attention.dropout_keep_mask
