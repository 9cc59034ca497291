"""On a GPU: every bundled operator gives bit-identical results whether its launches are replayed
(kernels.replay) or dispatched by Triton's JIT, over calls that repeat a signature with new
tensors (fresh values, fresh addresses, a misaligned view) -- the case the conformance tiers,
which run each case once, do not repeat.  Prints the replay counts; exit status 1 on a mismatch.

    python scripts/replay_check.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.backends import activate  # noqa: E402

activate()

import torch  # noqa: E402

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import replay  # noqa: E402

DEVICE = "cuda"


def dense(dtype, causal, window=None, softcap=None):
    def inputs(seed):
        gen = torch.Generator(device=DEVICE).manual_seed(seed)
        q, k, v = (torch.randn(2, 4, 300, 64, device=DEVICE, dtype=dtype, generator=gen).requires_grad_()
                   for _ in range(3))
        return q, k, v

    def run(q, k, v):
        out, lse = kernels.flash_attention(q, k, v, causal=causal, return_log_normalizer=True,
                                           window_size=window, softcap=softcap)
        grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
        return (out, lse, *grads)
    return inputs, run


def varlen(dtype):
    lengths = [0, 1, 200, 57]
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=DEVICE)

    def inputs(seed):
        gen = torch.Generator(device=DEVICE).manual_seed(seed)
        return tuple(torch.randn(int(cu[-1]), 4, 64, device=DEVICE, dtype=dtype, generator=gen).requires_grad_()
                     for _ in range(3))

    def run(q, k, v):
        out = kernels.flash_attention_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
        return (out, *torch.autograd.grad(out.float().sum(), (q, k, v)))
    return inputs, run


def decode(dtype, paged, appended, **options):
    batch, heads, kv_heads, dim, page = 3, 8, 2, 128, 16
    lens = torch.tensor([0, 37, 700], dtype=torch.int32, device=DEVICE)
    pages_each = 48

    def inputs(seed):
        gen = torch.Generator(device=DEVICE).manual_seed(seed)
        q = torch.randn(batch, 2, heads, dim, device=DEVICE, dtype=dtype, generator=gen)
        shape = (batch * pages_each, page, kv_heads, dim) if paged else (batch, pages_each * page, kv_heads, dim)
        k, v = (torch.randn(shape, device=DEVICE, dtype=dtype, generator=gen) for _ in range(2))
        new = [torch.randn(batch, 2, kv_heads, dim, device=DEVICE, dtype=dtype, generator=gen) for _ in range(2)]
        return q, k, v, *(new if appended else (None, None))

    table = torch.randperm(batch * pages_each, generator=torch.Generator().manual_seed(1)).to(
        device=DEVICE, dtype=torch.int32).view(batch, pages_each)

    def run(q, k, v, k_new, v_new):
        out, lse = kernels.kv_cache_attention(q, k, v, lens, block_table=table if paged else None, k_new=k_new,
                                              v_new=v_new, return_log_normalizer=True,
                                              **({"causal": True} | options))
        return out, lse, k, v
    return inputs, run


def piecewise(dtype):
    def inputs(seed):
        gen = torch.Generator(device=DEVICE).manual_seed(seed)
        return tuple(torch.randn(1, 2, 260, 64, device=DEVICE, dtype=dtype, generator=gen).requires_grad_()
                     for _ in range(5))

    def run(q1, k1, q2, k2, v):
        out = kernels.piecewise_attention(q1, k1, q2, k2, v, 100, causal=True)
        return (out, *torch.autograd.grad(out.float().sum(), (q1, k1, q2, k2, v)))
    return inputs, run


OPERATORS = {
    "flash fp16 causal": dense(torch.float16, True),
    "flash bf16 window softcap": dense(torch.bfloat16, False, window=(64, 0), softcap=20.0),
    "flash fp32": dense(torch.float32, False),
    "varlen bf16 causal": varlen(torch.bfloat16),
    "decode fp16 paged": decode(torch.float16, True, False),
    "decode bf16 contiguous append": decode(torch.bfloat16, False, True),
    "decode fp16 paged append unchecked": decode(torch.float16, True, True, check_values=False, num_splits=3),
    "decode bf16 paged window softcap alibi": decode(
        torch.bfloat16, True, False, causal=False, window_size=(100, 0), softcap=30.0,
        alibi_slopes=torch.linspace(0.05, 0.5, 8, device=DEVICE)),
    "piecewise fp16": piecewise(torch.float16),
}


def misaligned(tensor):
    """The same values at an address 2 elements past a 16-byte boundary (a different JIT key)."""
    if tensor is None:
        return None
    room = torch.empty(tensor.numel() + 2, device=DEVICE, dtype=tensor.dtype)
    view = room[2:].view(tensor.shape).copy_(tensor.detach())
    return view.requires_grad_(tensor.requires_grad)


def fresh(tensors):
    return [None if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def bad_values_after_a_step() -> bool:
    """A decode signature launched from its recorded step (kernels.step_replay) still refuses a
    length beyond the cache: ValueError, the caches untouched; the next good call as before."""
    inputs, _ = OPERATORS["decode fp16 paged append unchecked"]
    q, k, v, k_new, v_new = inputs(7)
    pages = torch.arange(3 * 48, device=DEVICE, dtype=torch.int32).view(3, 48)
    call = lambda lens: kernels.kv_cache_attention(q, k, v, lens, block_table=pages, k_new=k_new, v_new=v_new)
    good = torch.tensor([5, 40, 600], dtype=torch.int32, device=DEVICE)
    first = call(good).clone()  # runs the whole path and records the step
    call(good)  # launched from the step
    before = (k.clone(), v.clone())
    try:
        call(torch.tensor([5, 48 * 16, 600], dtype=torch.int32, device=DEVICE))  # + 2 new tokens: past the cache
        refused = False
    except ValueError as error:
        refused = "cache_seqlens" in str(error)
    untouched = torch.equal(before[0], k) and torch.equal(before[1], v)
    again = torch.equal(call(good), first)  # the same tokens appended at the same places: the same output
    print(f"bad values after a step: refused {refused}, caches untouched {untouched}, next call as before {again}")
    return refused and untouched and again


def main() -> int:
    failures = 0
    for name, (inputs, run) in OPERATORS.items():
        for seed, shift in ((0, False), (1, False), (2, True), (3, False)):
            tensors = inputs(seed)
            if shift:
                tensors = [misaligned(t) for t in tensors]
            replay.set_enabled(True)
            replayed = run(*fresh(tensors))
            replay.set_enabled(False)
            dispatched = run(*fresh(tensors))
            replay.set_enabled(True)
            same = all(torch.equal(a, b) for a, b in zip(replayed, dispatched))
            failures += not same
            print(f"{name:34s} seed {seed}{' misaligned' if shift else '':11s} {'same' if same else 'DIFFERENT'}")
    failures += not bad_values_after_a_step()
    torch.cuda.synchronize()
    print(f"launches: {replay.counts['replayed']} replayed, {replay.counts['through_jit']} through the JIT")
    return 1 if failures or not replay.counts["replayed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
