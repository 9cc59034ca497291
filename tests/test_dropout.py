"""Dropout in the bundled flash_attention: the keep mask is Philox-4x32-10 of the
global (seed, batch*head, row, key) position, the same in every kernel and every
tiling; its keep rate is right; and forward and backward match the reference
replaying that mask by the 2x rule."""

import math

import numpy as np
import pytest
import torch

from conformance.backends import LaunchConfig, LaunchTable, activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import dropout as kernels_dropout  # noqa: E402
from kernel_checks import assert_rule, judge_kernel, kernel_tensors, make_qkv  # noqa: E402
from conformance.bundled.reference.philox import KNOWN_ANSWERS, philox4x32_10  # noqa: E402

DEVICE = PROFILE.device


# ----------------------------------------------------------------------------- Philox, independently

def test_numpy_philox_matches_random123_known_answers():
    for (counter, key), expected in KNOWN_ANSWERS.items():
        assert tuple(int(x) for x in philox4x32_10(counter, key)) == expected


def expected_mask(seed, p, batch_head, rows, keys):
    """keep[i, j] of one batch*head: word j % 4 of Philox(counter=(j // 4, i, batch_head, 0),
    key=seed), kept iff its top 31 bits >= floor(p * 2^31)."""
    j, i = np.meshgrid(np.arange(*keys, dtype=np.uint64), np.arange(*rows, dtype=np.uint64))
    words = philox4x32_10((j // np.uint64(4), i, np.full_like(i, batch_head), np.zeros_like(i)),
                          (seed % 2**32, (seed >> 32) % 2**32))
    word = np.choose((j % np.uint64(4)).astype(np.int64), words)
    return torch.from_numpy((word >> np.uint64(1)) >= np.uint64(int(p * 2**31)))


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 12345, 2**64 - 1])
def test_mask_is_philox_of_the_global_position(seed):
    mask = kernels.dropout_keep_mask(seed, 0.3, 2, 3, 50, 70, device=DEVICE, batch_heads=(4, 6))
    for n, batch_head in enumerate((4, 5)):
        assert torch.equal(mask[n].cpu(), expected_mask(seed, 0.3, batch_head, (0, 50), (0, 70)))


def test_counters_do_not_wrap_beyond_two_to_the_32_positions():
    """B*H = 70,001 slices of 32768 x 32768: flat offsets far beyond 2^32 (and beyond a 65,535
    grid), still the Philox of the exact position; a flat int32/uint32 offset would collide."""
    batch_heads, seq = 70_001, 32_768
    window = dict(batch_heads=(batch_heads - 2, batch_heads), rows=(seq - 5, seq), keys=(seq - 9, seq))
    mask = kernels.dropout_keep_mask(3, 0.5, batch_heads, 1, seq, seq, device=DEVICE, **window)
    for n in range(2):
        want = expected_mask(3, 0.5, batch_heads - 2 + n, window["rows"], window["keys"])
        assert torch.equal(mask[n].cpu(), want)


# ----------------------------------------------------------------------------- the mask as a sample

@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_is_one_minus_p(p):
    mask = kernels.dropout_keep_mask(1234, p, 2, 4, 128, 128, device=DEVICE)  # 131,072 draws
    n = mask.numel()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(mask.float().mean().item() - (1 - p)) < 4 * sigma


def test_mask_reproducible_per_seed_and_different_across_seeds():
    args = (0.5, 1, 2, 64, 64)
    first = kernels.dropout_keep_mask(11, *args, device=DEVICE)
    assert torch.equal(first, kernels.dropout_keep_mask(11, *args, device=DEVICE))
    other = kernels.dropout_keep_mask(12, *args, device=DEVICE)
    # Independent masks at p = 0.5 disagree on half the positions.
    assert abs((first != other).float().mean().item() - 0.5) < 0.05


def test_mask_chunks_are_slices_of_the_whole(monkeypatch):
    whole = kernels.dropout_keep_mask(5, 0.2, 2, 2, 45, 77, device=DEVICE)
    monkeypatch.setattr(kernels_dropout, "_MASK_BLOCK", 16)  # another tiling of the materialiser
    chunk = kernels.dropout_keep_mask(5, 0.2, 2, 2, 45, 77, device=DEVICE,
                                      batch_heads=(1, 3), rows=(7, 40), keys=(30, 77))
    assert torch.equal(chunk, whole[1:3, 7:40, 30:77])
    assert kernels.dropout_keep_mask(5, 0.2, 2, 2, 45, 77, device=DEVICE, rows=(3, 3)).shape == (4, 0, 77)


def test_mask_range_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"rows: expected a \(start, stop\) range within \[0, 8\]"):
        kernels.dropout_keep_mask(1, 0.1, 1, 1, 8, 8, device=DEVICE, rows=(2, 9))
    with pytest.raises(TypeError, match="dropout_seed: expected an int, got None"):
        kernels.dropout_keep_mask(None, 0.1, 1, 1, 8, 8, device=DEVICE)


# ----------------------------------------------------------------------------- every kernel uses that mask

def _masks_the_kernels_applied(p, seed, seq):
    """Read off the keep mask Z each kernel applied (c = 1/(1-p), scale = 1/sqrt(seq)).

    With q = 0 every weight is 1/seq, and with k = v = I: out[i, j] = c Z_ij / seq (forward);
    for do = I, dV[j, i] = c Z_ij / seq (dK/dV kernel); for any do, dQ[i, j] =
    scale / seq * (c Z_ij do_ij - delta_i) with delta_i = sum_j c Z_ij do_ij / seq (dQ kernel)."""
    eye = torch.eye(seq, dtype=torch.float32, device=DEVICE).expand(1, 2, seq, seq)
    q = torch.zeros_like(eye).requires_grad_()
    k, v = eye.clone().requires_grad_(), eye.clone().requires_grad_()
    out = kernels.flash_attention(q, k, v, dropout_p=p, dropout_seed=seed)
    dv = torch.autograd.grad(out, v, eye, retain_graph=True)[0]
    do = 1 + torch.rand(eye.shape, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    dq = torch.autograd.grad(out, q, do)[0]
    return out.detach() != 0, dv.transpose(-1, -2) != 0, dq, do


def test_forward_and_backward_apply_the_materialised_mask_under_any_tiling(monkeypatch):
    seq, p, seed = 64, 0.4, 2**33 + 9
    mask = kernels.dropout_keep_mask(seed, p, 1, 2, seq, seq, device=DEVICE).view(1, 2, seq, seq)
    for launch in (None, LaunchConfig(16, 32), LaunchConfig(32, 16)):
        if launch is not None:
            for kernel in ("fwd", "bwd_dkdv", "bwd_dq"):
                monkeypatch.setitem(PROFILE.launch, kernel, LaunchTable(((256, launch),)))
        forward, backward, dq, do = _masks_the_kernels_applied(p, seed, seq)
        assert torch.equal(forward, mask) and torch.equal(backward, mask), launch
        # One wrong keep bit moves dq by >= c * scale / seq = 3e-3; fp32 noise is ~1e-7.
        dp = mask.double() * do.double() / (1 - p)
        expected = (dp - dp.mean(dim=-1, keepdim=True)) / seq / math.sqrt(seq)
        assert (dq.double() - expected).abs().max().item() < 1e-5, launch


# ----------------------------------------------------------------------------- accuracy by the rule

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads,seq_q,seq_k", [(4, 2, 96, 80), (2, 2, 70, 130)],
                         ids=["gqa", "mha"])
def test_dropout_forward_and_backward_match_the_replaying_reference(dtype, causal, heads, kv_heads,
                                                                    seq_q, seq_k):
    batch = 2 if heads > kv_heads else 1  # batch > 1 once, where the GQA indexing is busiest
    q, k, v, do = make_qkv(batch, heads, kv_heads, seq_q, seq_k, 32, dtype, seed=seq_q + causal)
    assert_rule(judge_kernel(q, k, v, do, causal, p=0.3, seed=2024))


def test_fp32_dropout_matches_the_replaying_reference():
    q, k, v, do = make_qkv(1, 2, 1, 33, 65, 64, torch.float32, seed=3)
    assert_rule(judge_kernel(q, k, v, do, True, p=0.1, seed=99))


def test_p_zero_is_bitwise_no_dropout():
    q, k, v, do = make_qkv(1, 4, 2, 50, 70, 32, torch.bfloat16, seed=4)
    plain = kernel_tensors(q, k, v, do, causal=True)
    zero = kernel_tensors(q, k, v, do, causal=True, p=0.0, seed=None)
    assert all(torch.equal(plain[name], zero[name]) for name in plain)


def test_lse_and_total_ignore_dropout():
    q, k, v, do = make_qkv(1, 2, 2, 40, 40, 16, torch.float16, seed=5)
    plain = kernel_tensors(q, k, v, do, causal=False, total=True)
    dropped = kernel_tensors(q, k, v, do, causal=False, p=0.5, seed=1, total=True)
    assert torch.equal(plain["lse"], dropped["lse"]) and torch.equal(plain["total"], dropped["total"])
    assert not torch.equal(plain["out"], dropped["out"])


def test_unseeded_dropout_follows_torch_manual_seed():
    q, k, v, _ = make_qkv(1, 2, 2, 32, 32, 16, torch.float16, seed=6)
    torch.manual_seed(0)
    first = kernels.flash_attention(q, k, v, dropout_p=0.5)
    second = kernels.flash_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    assert torch.equal(first, kernels.flash_attention(q, k, v, dropout_p=0.5))
    assert not torch.equal(first, second)
