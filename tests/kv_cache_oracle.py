"""kv_cache_attention's test oracle (issue 34), shared by the tests of its kernels, plan and
checks: cases described as data (a cache Layout, a Case), their inputs drawn seeded on the
CPU, and `judge`, which runs the operator under poisoned outputs against a float64 oracle
written here -- each sequence's keys gathered through its block table, cut at its length, then
the dense reference of tests/test_kernel_variants.py on them -- by the 2x rule, and checks the
caches bit for bit.

It activates the backend (TRITON_INTERPRET=1 on CPU) before it imports the kernels, as every
test module that imports it does first."""

import math
from dataclasses import dataclass, field

import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from test_kernel_variants import BF16, FP16, FP32, assert_rule, reference, score_size  # noqa: E402

DEVICE = PROFILE.device
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NAN = float("nan")


@dataclass(frozen=True)
class Layout:
    """Cache lengths before the call, one per sequence; page_size None: contiguous.  Paged:
    pages shuffled, one page nobody uses, sequence 1's first `shared` pages sequence 0's.
    `spare` positions past each length (room for the append)."""

    lengths: tuple
    page_size: int | None = None
    shared: int = 0
    spare: int = 0


@dataclass(frozen=True)
class Case:
    """q of (B, seq_q, heads, head_dim) in `dtype`; the cache in `cache_dtype` (None: q's);
    `junk`: what every slot that holds no key holds (None: drawn values, like the keys)."""

    dtype: torch.dtype
    layout: Layout
    seq_q: int
    heads: int
    kv_heads: int
    head_dim: int
    options: dict = field(default_factory=dict)
    append: bool = False
    cache_dtype: torch.dtype | None = None
    junk: float | None = None
    scale: float = 1.0


CASES = {
    "contiguous-fp16-lengths-0-1-unaligned-nan-junk":
        Case(FP16, Layout((0, 1, 37, 20)), 1, 2, 2, 32, junk=NAN),
    "paged1-bf16-gqa4-causal-splits3": Case(BF16, Layout((5, 23), 1), 4, 8, 2, 16, dict(causal=True, num_splits=3)),
    "paged16-fp32-mqa-splits16-last-page-partial":
        Case(FP32, Layout((16, 45, 1), 16), 1, 4, 1, 64, dict(num_splits=16), junk=NAN),
    # more splits than the merge reads at once (kernels.decode_plan.MERGE_SPLIT_BLOCK), head dim 96:
    # a second, partly masked block of splits and head-dim columns past the head dim
    "paged4-fp16-splits40-d96-gqa2": Case(FP16, Layout((70, 3, 0), 4), 2, 4, 2, 96, dict(num_splits=40), junk=NAN),
    "paged7-shared-prefix-fp16-causal": Case(FP16, Layout((30, 26), 7, shared=3), 4, 4, 2, 32,
                                             dict(causal=True, num_splits=1)),
    "window-fp16": Case(FP16, Layout((40, 9), 16), 4, 2, 1, 16, dict(window_size=(6, 2), num_splits=3)),
    "softcap-bf16": Case(BF16, Layout((33,)), 1, 4, 2, 64, dict(softcap=4.0), scale=3.0),
    "alibi-causal-fp32-rows-without-keys": Case(FP32, Layout((2, 40), 16), 4, 4, 2, 16,
                                                dict(alibi_slopes="BH", causal=True)),
    "append-paged16-fp16-causal": Case(FP16, Layout((0, 13, 30), 16, spare=4), 4, 4, 2, 32,
                                       dict(causal=True, num_splits=3), append=True, junk=NAN),
    "append-contiguous-bf16": Case(BF16, Layout((1, 20), spare=1), 1, 2, 1, 16, append=True),
    "fp8e4m3-paged16-fp16": Case(FP16, Layout((24, 37), 16), 1, 4, 2, 32, dict(k_descale=0.25, v_descale=0.5),
                                 cache_dtype=E4M3),
    "fp8e5m2-append-bf16": Case(BF16, Layout((3, 17), 16, spare=4), 4, 2, 2, 16,
                                dict(k_descale=0.5, v_descale=0.25, causal=True), append=True, cache_dtype=E5M2),
}


def draw(shape, gen, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


def page_table(layout: Layout, gen) -> tuple[torch.Tensor, int]:
    """(block table, pages): each sequence's pages shuffled over the cache, -1 past them."""
    ps = layout.page_size
    counts = [math.ceil((length + layout.spare) / ps) for length in layout.lengths]
    own = [count - (layout.shared if b == 1 else 0) for b, count in enumerate(counts)]
    physical = torch.randperm(sum(own) + 1, generator=gen).tolist()  # one page is nobody's
    table = torch.full((len(counts), max(counts) + 1), -1, dtype=torch.int32)
    for b, count in enumerate(counts):
        shared = layout.shared if b == 1 else 0
        table[b, :shared] = table[0, :shared]
        table[b, shared:count] = torch.tensor([physical.pop() for _ in range(count - shared)], dtype=torch.int32)
    return table, sum(own) + 1


def cache_of(case: Case, gen):
    """(k_cache, v_cache, block_table or None, the table and page size the oracle reads by)."""
    layout, dtype = case.layout, case.cache_dtype or case.dtype
    batch = len(layout.lengths)
    if layout.page_size is None:
        smax = max(layout.lengths) + layout.spare
        table, pages, page_size = torch.arange(batch, dtype=torch.int32)[:, None], batch, smax
    else:
        (table, pages), page_size = page_table(layout, gen), layout.page_size
    scale = case.scale * (4 if dtype.itemsize == 1 else 1)  # fp8: values the descales bring back to ~1
    k, v = (draw((pages, page_size, case.kv_heads, case.head_dim), gen, FP32, scale) for _ in "kv")
    if case.junk is not None:
        held = torch.zeros(pages, page_size, dtype=torch.bool)
        for b, length in enumerate(layout.lengths):
            positions = torch.arange(length)
            held[table[b, positions // page_size].long(), positions % page_size] = True
        k[~held], v[~held] = case.junk, case.junk
    k, v = k.to(dtype), v.to(dtype)
    return k, v, None if layout.page_size is None else table, table, page_size


def gathered(cache, table, page_size, b, length):
    """Sequence b's first `length` positions of a cache, (length, Hkv, D)."""
    positions = torch.arange(length)
    return cache[table[b, positions // page_size].long(), positions % page_size]


def appended(cache, table, page_size, lengths, new):
    """The cache after writing new (B, Sq, Hkv, D) at positions lengths[b] .. + Sq - 1."""
    cache = cache.clone()
    for b, length in enumerate(lengths):
        positions = length + torch.arange(new.shape[1])
        cache[table[b, positions // page_size].long(), positions % page_size] = new[b]
    return cache


def dequantised(keys, dtype, descale):
    return keys if keys.dtype == dtype else (keys.to(FP32) * descale).to(dtype)


def oracle(q, k_cache, v_cache, table, page_size, lengths, options, exact):
    """out (B, Sq, H, D) and lse (B, H, Sq) per sequence: its context gathered, dequantised,
    then the dense reference (bottom-right aligned to the context's length)."""
    slopes = options.get("alibi_slopes")
    window = options.get("window_size")
    outs, lses = [], []
    for b, length in enumerate(lengths):
        k, v = (dequantised(gathered(cache, table, page_size, b, length), q.dtype, options.get(f"{name}_descale", 1.0))
                for name, cache in (("k", k_cache), ("v", v_cache)))
        sequence = [t.transpose(0, 1)[None] for t in (q[b], k, v)]
        result = reference(*sequence, torch.zeros_like(sequence[0]), causal=options.get("causal", False),
                           window=window, softcap=options.get("softcap"),
                           alibi=None if slopes is None else (slopes if slopes.dim() == 1 else slopes[b]), exact=exact)
        outs.append(result["out"][0].transpose(0, 1))
        lses.append(result["lse"][0])
    return dict(out=torch.stack(outs), lse=torch.stack(lses))


def inputs_of(case: Case, seed=0):
    gen = torch.Generator().manual_seed(seed + case.head_dim + 7 * len(case.layout.lengths))
    batch = len(case.layout.lengths)
    q = draw((batch, case.seq_q, case.heads, case.head_dim), gen, case.dtype, case.scale)
    k_cache, v_cache, block_table, table, page_size = cache_of(case, gen)
    new = {}
    if case.append:
        new = {name: draw((batch, case.seq_q, case.kv_heads, case.head_dim), gen, FP32).to(k_cache.dtype)
               for name in ("k_new", "v_new")}
    options = dict(case.options)
    if "alibi_slopes" in options:
        shape = (case.heads,) if options["alibi_slopes"] == "H" else (batch, case.heads)
        options["alibi_slopes"] = torch.rand(shape, generator=gen) * 0.5 + 0.05
    seqlens = torch.tensor(case.layout.lengths, dtype=torch.int32)
    return q, k_cache, v_cache, seqlens, block_table, new, options, (table, page_size)


def bits(t):
    return t.view(torch.uint8)


def judge(case: Case, operator=None, seed=0):
    """Run `operator` (the bundled one by default) on the case under poisoned outputs; assert
    the 2x rule on out and lse, and the caches bit for bit (the new entries k_new/v_new,
    nothing else touched).  Returns the kernel's out and lse."""
    operator = operator or kernels.kv_cache_attention
    q, k_cache, v_cache, seqlens, block_table, new, options, (table, page_size) = inputs_of(case, seed)
    lengths = list(case.layout.lengths)
    expected = [k_cache, v_cache]
    if case.append:
        expected = [appended(c, table, page_size, lengths, new[name]) for c, name in ((k_cache, "k_new"),
                                                                                      (v_cache, "v_new"))]
        lengths = [length + case.seq_q for length in lengths]
    with kernels.poisoned_outputs():
        out, lse = operator(q, k_cache, v_cache, seqlens, block_table=block_table, return_log_normalizer=True,
                            **new, **options)
    for got, want, name in zip((k_cache, v_cache), expected, ("k_cache", "v_cache")):
        assert torch.equal(bits(got), bits(want)), f"{name}: not the expected cache after the call"
    ref, matched = (oracle(q, *expected, table, page_size, lengths, options, exact) for exact in (True, False))
    keys = torch.cat([dequantised(gathered(expected[0], table, page_size, b, n), q.dtype,
                                  options.get("k_descale", 1.0)) for b, n in enumerate(lengths)])
    term = score_size(q.transpose(1, 2), keys.transpose(0, 1)[None], options.get("alibi_slopes"),
                      case.seq_q, max(lengths)) if len(keys) else 0.0
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == ref["lse"].shape
    assert_rule(dict(out=out, lse=lse), matched, ref, case.dtype, term)
    return out, lse



def valid_arguments(paged=False):
    gen = torch.Generator().manual_seed(1)
    q = draw((2, 4, 4, 16), gen, FP16)
    shape = (5, 4, 2, 16) if paged else (2, 8, 2, 16)
    args = dict(q=q, k_cache=draw(shape, gen, FP16), v_cache=draw(shape, gen, FP16),
                cache_seqlens=torch.tensor([3, 2], dtype=torch.int32))
    if paged:
        args["block_table"] = torch.tensor([[4, 0, -1], [2, 3, 1]], dtype=torch.int32)
    return args
