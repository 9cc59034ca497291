"""kv_cache_attention on the interpreter (issue 34): the kernel against a float64 oracle written
here -- each sequence's keys gathered through its block table, cut at its length, then the dense
reference of tests/test_kernel_variants.py on them -- by the 2x rule; the append; every argument
error; and, for each of the operator's mutants, a case that kills it."""

import math
from dataclasses import dataclass, field

import pytest
import torch

from conformance.backends import activate

PROFILE = activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import decode_plan, tuning, tuning_space, value_check  # noqa: E402
from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402
from conformance.bundled.kernels.targets import INTERPRETER, Target  # noqa: E402
from conformance.bundled.mutants import registry  # noqa: E402
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


@pytest.mark.parametrize("name", CASES)
def test_kernel_follows_the_rule_against_the_per_sequence_oracle(name):
    judge(CASES[name])


def test_an_empty_sequence_gives_out_0_and_lse_minus_inf():
    out, lse = judge(CASES["contiguous-fp16-lengths-0-1-unaligned-nan-junk"])
    assert not out[0].any() and torch.isneginf(lse[0]).all()
    assert torch.isfinite(lse[1:]).all()


def test_the_merge_rescales_the_blocks_of_splits_it_read_before(monkeypatch):
    """Two splits a pass: the merge's running max moves from block to block (the longest
    sequence's later splits, the others' empty ones), and each block's sums are rescaled to it."""
    monkeypatch.setattr(decode_plan, "MERGE_SPLIT_BLOCK", 2)
    decode_plan._plan.cache_clear()
    try:
        judge(CASES["paged4-fp16-splits40-d96-gqa2"])
        judge(Case(FP32, Layout((70, 33, 5), 4), 4, 8, 2, 32, dict(num_splits=7), scale=3.0))
    finally:
        decode_plan._plan.cache_clear()


def test_head_slices_read_the_gathered_keys(monkeypatch):
    """A launch that slices the head dim (RDNA's tables at D >= 128) multiplies 16-column
    slices of the gathered q and key rows: by the rule, with NaN in every unused slot."""
    monkeypatch.setitem(tuning.OVERRIDES, "decode_split", tuning.LaunchConfig(16, 16, head_chunk=16))
    judge(Case(FP16, Layout((19, 40), 16), 4, 4, 2, 64, dict(causal=True, num_splits=2), junk=NAN))


def test_strided_inputs_are_read_in_place_and_the_grid_splits_over_sequences_x_kv_heads(monkeypatch):
    """q a (B, H, Sq, D) tensor's transpose, the caches every other page of a larger tensor:
    the same bits as contiguous copies; so are launches of one (sequence, kv head) each."""
    q, k_cache, v_cache, seqlens, table, _, options, _ = inputs_of(CASES["window-fp16"])
    run = lambda *tensors: kernels.kv_cache_attention(*tensors, seqlens, block_table=table, **options)  # noqa: E731
    expected = run(q, k_cache, v_cache)
    strided = [q.transpose(1, 2).contiguous().transpose(1, 2)]
    for cache in (k_cache, v_cache):
        spaced = torch.zeros((2 * cache.shape[0], *cache.shape[1:]), dtype=cache.dtype)
        spaced[::2] = cache
        strided.append(spaced[::2])
    assert not any(t.is_contiguous() for t in strided)
    assert torch.equal(run(*strided), expected)
    monkeypatch.setattr(kernels_launch, "MAX_GRID_BATCH_HEADS", 1)
    assert torch.equal(run(q, k_cache, v_cache), expected)


def test_a_contiguous_cache_s_table_is_made_once_per_batch_size_and_kept():
    """A captured CUDA graph keeps launching with the table it was captured with: the one made
    before capture, which must never be freed (kernels.kv_cache._contiguous_table)."""
    from conformance.bundled.kernels import kv_cache

    table = kv_cache._contiguous_table(3, torch.device("cpu"))
    assert torch.equal(table, torch.tensor([[0], [1], [2]], dtype=torch.int32))
    assert kv_cache._contiguous_table(3, torch.device("cpu")) is table
    assert kv_cache._CONTIGUOUS_TABLES[(3, torch.device("cpu"))] is table


def test_the_split_heuristic_fills_the_processors_within_its_bounds():
    fill, deep = decode_plan.FILL_PROGRAMS_PER_PROCESSOR, decode_plan.DEEP_PROGRAMS_PER_PROCESSOR
    assert decode_plan.split_count(5, 64, 4000, 64, 132) == 5  # forced
    assert decode_plan.split_count(0, 2, 1 << 20, 64, 132) == decode_plan.MAX_SPLITS  # capped
    assert decode_plan.split_count(0, 64, 1 << 20, 64, 132) == deep * 132 // 64  # long caches: deep
    assert decode_plan.split_count(0, 64, 64 * 24, 64, 132) == fill * 132 // 64  # 24 tiles: no split of 16
    assert decode_plan.split_count(0, 2, 40 * 16, 16, 64) == decode_plan.MAX_SPLITS
    assert decode_plan.split_count(0, 2, 3 * 16, 16, 64) == 3  # a split holds one key tile at least
    assert decode_plan.split_count(0, fill * 132, 1024, 64, 132) == 1  # the programs fill the processors alone
    assert decode_plan.split_count(0, fill * 132 - 1, 1024, 64, 132) == 1  # rounded down
    assert decode_plan.split_count(0, 2, 0, 16, 8) == 1  # no key anywhere


def test_the_heuristic_picks_the_split_counts_the_h100_probes_found_best():
    """On an H100's 132 SMs, one row tile per (sequence, kv head), 8 kv heads, 128-key tiles
    (D 128): the split counts benchmarks/decode_probe.py measured best, graph-timed
    (reports/h100-sm90/kv-cache/split-probe-graph/ and, since the one-pass merge, merge-one-pass/)
    and for long caches (reports/h100-sm90/kv-cache/split-probe/)."""
    sms, tile = 132, 128
    assert decode_plan.split_count(0, 1 * 8, 4096, tile, sms) == 32
    assert decode_plan.split_count(0, 1 * 8, 1024, tile, sms) == 8
    assert decode_plan.split_count(0, 8 * 8, 4096, tile, sms) == 4
    assert decode_plan.split_count(0, 8 * 8, 1024, tile, sms) == 4
    assert decode_plan.split_count(0, 32 * 8, 1024, tile, sms) == 1
    assert decode_plan.split_count(0, 128 * 8, 1024, tile, sms) == 1
    assert decode_plan.split_count(0, 1 * 8, 131072, tile, sms) == 32
    assert decode_plan.split_count(0, 8 * 8, 131072, tile, sms) == 16


def test_a_launch_plan_is_made_once_per_signature_and_follows_the_tables(monkeypatch):
    """The second call of a signature reuses its plan; an override of the split kernel's
    configuration (as a sweep sets) makes a new one, which the launch records."""
    args = valid_arguments(paged=True)
    expected = kernels.kv_cache_attention(**args)
    decode_plan._plan.cache_clear()
    for _ in range(3):
        assert torch.equal(bits(kernels.kv_cache_attention(**args)), bits(expected))
    assert decode_plan._plan.cache_info().misses == 1
    config = tuning.LaunchConfig(16, 32)
    monkeypatch.setitem(tuning.OVERRIDES, "decode_split", config)
    with tuning.recorded_launches() as launched:
        out = kernels.kv_cache_attention(**args)
    assert decode_plan._plan.cache_info().misses == 2
    assert launched["decode_split"] == config
    assert torch.allclose(out.float(), expected.float(), atol=1e-2)  # key tiles of 32: other splits, one result


@pytest.mark.parametrize("paged", [False, True])
def test_a_single_split_writes_the_output_itself_as_the_merge_would(paged):
    """num_splits=1: the split kernel finishes out and lse, and no merge is launched.  Two
    splits of which only the first holds keys (every cache here fits one key tile) go through
    the merge, whose weights are then exactly 1 and 0: the same bits."""
    args = valid_arguments(paged=paged)
    with tuning.recorded_launches() as launched:
        one = kernels.kv_cache_attention(**args, num_splits=1, return_log_normalizer=True)
    assert "decode_split" in launched and "decode_merge" not in launched
    with tuning.recorded_launches() as launched:
        merged = kernels.kv_cache_attention(**args, num_splits=2, return_log_normalizer=True)
    assert "decode_merge" in launched
    for single, through_merge in zip(one, merged):
        assert torch.equal(bits(single), bits(through_merge))


def test_the_checks_of_a_signature_seen_before_still_refuse_what_changed():
    """Shapes, dtypes and devices checked once per signature: a call that changes any of them
    is checked again, with the same error."""
    args = valid_arguments()
    kernels.kv_cache_attention(**args)
    with pytest.raises(TypeError, match="^k_cache: "):
        kernels.kv_cache_attention(**{**args, "k_cache": args["k_cache"].float(), "v_cache": args["v_cache"].float()})
    with pytest.raises(ValueError, match="^q: "):
        kernels.kv_cache_attention(**{**args, "q": args["q"].clone().requires_grad_()})
    with torch.no_grad():
        kernels.kv_cache_attention(**{**args, "q": args["q"].clone().requires_grad_()})
    with pytest.raises(ValueError, match="^cache_seqlens: "):
        kernels.kv_cache_attention(**{**args, "cache_seqlens": args["cache_seqlens"][:1]})


FAMILIES = [INTERPRETER, Target("cuda", 80, 32), Target("cuda", 90, 32), Target("cuda", 120, 32),
            Target("hip", "gfx942", 64), Target("hip", "gfx1100", 32), Target("hip", "gfx1201", 32)]


@pytest.mark.parametrize("target", FAMILIES, ids=lambda t: t.name)
def test_every_target_has_decode_launch_configurations_in_its_tuning_space(target):
    """decode_split and decode_merge take the forward's and the delta pre-pass's tiles where a
    set has none of its own (kernels.tuning.BORROWED), and the sweep covers what they take."""
    for kernel in ("decode_split", "decode_merge"):
        for dtype in ("fp16", "bf16", "fp32"):
            for head_dim in (16, 64, 128, 256):
                config = tuning.launch_config(kernel, head_dim, dtype, target)
                assert config in tuning_space.space(kernel, target, dtype), (kernel, dtype, head_dim, config)
    with tuning_space.configured("fwd", tuning.LaunchConfig(32, 32)):  # a sweep of fwd leaves decode alone
        assert tuning.launch_config("decode_split", 64, "fp16", Target("cuda", 80, 32)) == \
            tuning.AMPERE.tables["fwd"].pick(64)
        assert tuning.launch_config("decode_split", 64, "fp16", Target("cuda", 90, 32)) == \
            tuning.HOPPER.tables["decode_split"].pick(64)
        assert tuning.launch_config("decode_split", 64, "fp32", Target("cuda", 90, 32)) == \
            tuning.HOPPER.tables["fwd.fp32"].pick(64)


# ----------------------------------------------------------------------------- argument errors

def valid_arguments(paged=False):
    gen = torch.Generator().manual_seed(1)
    q = draw((2, 4, 4, 16), gen, FP16)
    shape = (5, 4, 2, 16) if paged else (2, 8, 2, 16)
    args = dict(q=q, k_cache=draw(shape, gen, FP16), v_cache=draw(shape, gen, FP16),
                cache_seqlens=torch.tensor([3, 2], dtype=torch.int32))
    if paged:
        args["block_table"] = torch.tensor([[4, 0, -1], [2, 3, 1]], dtype=torch.int32)
    return args


def _set(**changes):
    return lambda args: args.update(changes)


ERRORS = [
    ("q", lambda a: a.update(q=a["q"][0]), ValueError),
    ("q", lambda a: a.update(q=a["q"].to(torch.int32)), TypeError),
    ("q", lambda a: a.update(q=a["q"][..., :8]), ValueError),  # head dim 8
    ("q", lambda a: a.update(q=a["q"].clone().requires_grad_()), ValueError),  # forward only
    ("k_cache", lambda a: a.update(k_cache=a["k_cache"][0]), ValueError),
    ("k_cache", lambda a: a.update(k_cache=a["k_cache"].float(), v_cache=a["v_cache"].float()), TypeError),
    ("v_cache", lambda a: a.update(v_cache=a["v_cache"].float()), ValueError),
    ("v_cache", lambda a: a.update(v_cache=a["v_cache"][:, :4]), ValueError),  # another page size
    ("k_cache", lambda a: a.update(q=a["q"][:, :, :3]), ValueError),  # 2 kv heads, 3 query heads
    ("k_cache", lambda a: a.update(k_cache=a["k_cache"][..., :8], v_cache=a["v_cache"][..., :8]), ValueError),
    ("k_cache", lambda a: a.update(k_cache=a["k_cache"][:1], v_cache=a["v_cache"][:1]), ValueError),  # batch
    ("cache_seqlens", _set(cache_seqlens=[3, 2]), TypeError),
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([3, 2])), TypeError),  # int64
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([3], dtype=torch.int32)), ValueError),
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([3, -1], dtype=torch.int32)), ValueError),
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([9, 2], dtype=torch.int32)), ValueError),  # past Smax
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([3, 2], dtype=torch.int32, device="meta")), ValueError),
    ("cache_seqlens", lambda a: a.update(k_new=a["k_cache"][:, :4].clone(), v_new=a["v_cache"][:, :4].clone(),
                                         cache_seqlens=torch.tensor([5, 2], dtype=torch.int32)), ValueError),
    ("k_new", lambda a: a.update(k_new=a["k_cache"][:, :3].clone(), v_new=a["v_cache"][:, :3].clone()), ValueError),
    ("k_new", lambda a: a.update(k_new=a["k_cache"][:, :4].float(), v_new=a["v_cache"][:, :4].clone()), TypeError),
    ("v_new", lambda a: a.update(k_new=a["k_cache"][:, :4].clone()), ValueError),
    ("k_new", lambda a: a.update(v_new=a["v_cache"][:, :4].clone()), ValueError),
    ("causal", _set(causal=1), TypeError),
    ("window_size", _set(window_size=(-2, 0)), ValueError),
    ("window_size", _set(window_size=4), TypeError),
    ("softcap", _set(softcap=-1.0), ValueError),
    ("softcap", _set(softcap="4"), TypeError),
    ("alibi_slopes", _set(alibi_slopes=torch.ones(3)), ValueError),
    ("alibi_slopes", _set(alibi_slopes=torch.ones(4, dtype=FP16)), TypeError),
    ("sm_scale", _set(sm_scale=0.0), ValueError),
    ("num_splits", _set(num_splits=-1), ValueError),
    ("num_splits", _set(num_splits=2.0), TypeError),
    ("num_splits", _set(num_splits=True), TypeError),
    ("return_log_normalizer", _set(return_log_normalizer=1), TypeError),
    ("check_values", _set(check_values=None), TypeError),
    ("k_descale", _set(k_descale=0.5), ValueError),  # an fp16 cache
]
PAGED_ERRORS = [
    ("block_table", _set(block_table=torch.tensor([[4, 0, -1], [2, 3, 1]])), TypeError),  # int64
    ("block_table", _set(block_table=torch.tensor([4, 0, 2], dtype=torch.int32)), ValueError),
    ("block_table", _set(block_table=torch.tensor([[4, 0, -1]], dtype=torch.int32)), ValueError),
    ("block_table", _set(block_table=torch.tensor([[-1, 0, 4], [2, 3, 1]], dtype=torch.int32)), ValueError),
    ("block_table", _set(block_table=torch.tensor([[4, 0, 1], [5, 3, 1]], dtype=torch.int32)), ValueError),
    ("cache_seqlens", _set(cache_seqlens=torch.tensor([3, 13], dtype=torch.int32)), ValueError),  # 3 pages of 4
    ("k_descale", lambda a: a.update(k_cache=a["k_cache"].to(E4M3), v_cache=a["v_cache"].to(E4M3),
                                     k_descale=-1.0), ValueError),
    ("v_descale", lambda a: a.update(k_cache=a["k_cache"].to(E4M3), v_cache=a["v_cache"].to(E4M3),
                                     v_descale=torch.ones(2)), TypeError),
]


@pytest.mark.parametrize("paged, name, change, error",
                         [(False, *e) for e in ERRORS] + [(True, *e) for e in PAGED_ERRORS],
                         ids=lambda x: x if isinstance(x, str) else None)
def test_every_argument_error_names_its_argument_before_any_launch(paged, name, change, error):
    args = valid_arguments(paged)
    change(args)
    caches = [args[c].clone() for c in ("k_cache", "v_cache")]
    with pytest.raises(error, match=rf"^{name}: "):
        kernels.kv_cache_attention(**args)
    assert all(torch.equal(bits(args[c]), bits(b)) for c, b in zip(("k_cache", "v_cache"), caches))


def test_valid_arguments_run_and_unreached_table_entries_are_never_read():
    for paged in (False, True):
        args = valid_arguments(paged)  # the paged table's -1 lies past sequence 0's 3 keys
        out = kernels.kv_cache_attention(**args, softcap=0.0, window_size=[-1, -1])
        assert out.shape == args["q"].shape and torch.isfinite(out).all()


def test_unchecked_values_give_the_checked_call_s_results_and_read_nothing_back():
    """check_values=False runs the same launches (the split count comes from the cache's
    capacity either way) without reading cache_seqlens or block_table on the host."""
    for paged in (False, True):
        args = valid_arguments(paged)
        gen = torch.Generator().manual_seed(2)
        args.update(k_new=draw((2, 4, 2, 16), gen, FP16), v_new=draw((2, 4, 2, 16), gen, FP16))
        checked_cache, unchecked_cache = (args["k_cache"].clone() for _ in range(2))
        checked = kernels.kv_cache_attention(**{**args, "k_cache": checked_cache}, return_log_normalizer=True)
        read_back = []
        original = torch.Tensor.tolist
        try:
            torch.Tensor.tolist = lambda self: read_back.append(self) or original(self)
            unchecked = kernels.kv_cache_attention(**{**args, "k_cache": unchecked_cache}, return_log_normalizer=True,
                                                   check_values=False)
        finally:
            torch.Tensor.tolist = original
        assert not read_back
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(checked, unchecked))
        assert torch.equal(bits(checked_cache), bits(unchecked_cache))


def test_the_value_check_kernel_flags_exactly_the_sequences_that_leave_the_cache():
    """cache_values_kernel against the definition, per sequence: a length below 0 or past the
    capacity with the appended tokens, or a reached block-table entry outside [0, num_pages)
    (entries past a sequence's pages may hold anything)."""
    from conformance.bundled.kernels.decode_cache import cache_values_kernel

    gen = torch.Generator().manual_seed(5)
    num_pages, page_size, max_pages = 6, 4, 5
    for appended in (0, 3):
        lengths = torch.randint(-2, max_pages * page_size + 2, (40,), generator=gen, dtype=torch.int32)
        table = torch.randint(-1, num_pages + 1, (40, max_pages), generator=gen, dtype=torch.int32)
        for paged in (False, True):
            outside = torch.full((40,), -7, dtype=torch.int32)
            kernels_launch.launch(cache_values_kernel, 40, 1, lengths, table, outside, *table.stride(), appended,
                                  max_pages * page_size, num_pages, page_size, PAGED=paged, BLOCK=2)
            for b, length in enumerate(lengths.tolist()):
                reached = math.ceil(min(max(length + appended, 0), max_pages * page_size) / page_size)
                bad_pages = paged and any(not 0 <= entry < num_pages for entry in table[b, :reached].tolist())
                assert outside[b].item() == int(length < 0 or length + appended > max_pages * page_size or bad_pages)


def test_an_error_after_the_new_tokens_leaves_the_cache_untouched():
    args = valid_arguments()
    args.update(k_new=args["k_cache"][:, :4].clone(), v_new=args["v_cache"][:, :4].clone(), num_splits=-1)
    before = args["k_cache"].clone()
    with pytest.raises(ValueError, match="^num_splits: "):
        kernels.kv_cache_attention(**args)
    assert torch.equal(args["k_cache"], before)


@pytest.mark.parametrize("bad", ["length past the cache", "negative length", "page outside the cache"])
def test_values_that_leave_the_cache_raise_after_the_kernels_are_queued_and_touch_nothing(bad):
    """The value check's answer is read at the end of the call (kernels.value_check): by then the
    append and attention kernels ran, reading the answer first -- the caches must be as they
    were, the flagged sequence read as empty (no read through its length or table), and the
    error the one check_cache_values names."""
    args = valid_arguments(paged=True)
    gen = torch.Generator().manual_seed(3)
    args.update(k_new=draw((2, 4, 2, 16), gen, FP16), v_new=draw((2, 4, 2, 16), gen, FP16))
    if bad == "length past the cache":
        args["cache_seqlens"] = torch.tensor([3, 1 << 20], dtype=torch.int32)
        message = "^cache_seqlens: "
    elif bad == "negative length":
        args["cache_seqlens"] = torch.tensor([-5, 2], dtype=torch.int32)
        message = "^cache_seqlens: "
    else:
        args["block_table"] = torch.tensor([[4, 1 << 24, -1], [2, 3, 1]], dtype=torch.int32)
        message = "^block_table: expected the pages sequences reach in"
    before = (args["k_cache"].clone(), args["v_cache"].clone())
    with pytest.raises(ValueError, match=message):
        kernels.kv_cache_attention(**args)
    assert torch.equal(args["k_cache"], before[0]) and torch.equal(args["v_cache"], before[1])


def test_a_flagged_sequence_is_read_as_empty_and_the_others_as_they_are():
    """decode_split_kernel with CHECKED: the sequence the check flags sees no key (out 0, lse
    -inf in the partials), the other gives what an unchecked call gives."""
    from conformance.bundled.kernels import kv_cache

    args = valid_arguments(paged=True)
    out, lse = kernels.kv_cache_attention(**args, return_log_normalizer=True, check_values=False)
    problem = kv_cache._check_arguments(args["q"], args["k_cache"], args["v_cache"], args["cache_seqlens"],
                                        args["block_table"], None, None, False, kv_cache.NO_WINDOW, 0.0, None, None,
                                        0, None, None, True)
    problem.value_check = value_check.PendingCheck(torch.tensor([0, 1], dtype=torch.int32), None, None, ())
    flagged_out, flagged_lse = kv_cache._attend(args["q"], args["k_cache"], args["v_cache"], problem)
    assert torch.equal(flagged_out[0], out[0]) and torch.equal(flagged_lse[0], lse[0])
    assert not flagged_out[1].any() and torch.isneginf(flagged_lse[1]).all()


# ----------------------------------------------------------------------------- mutants

KILLERS = {
    "kv_cache_merge_without_rescale": "paged16-fp32-mqa-splits16-last-page-partial",
    "kv_cache_empty_split_lse_zero": "paged16-fp32-mqa-splits16-last-page-partial",
    "kv_cache_last_page_unmasked": "paged16-fp32-mqa-splits16-last-page-partial",
    "kv_cache_page_index_off_by_one": "paged7-shared-prefix-fp16-causal",
    "kv_cache_new_kv_one_slot_late": "append-contiguous-bf16",
}


@pytest.mark.parametrize("mutant", KILLERS)
def test_each_mutant_fails_the_oracle_on_its_case(mutant):
    """Through the mutant registry (kv_cache_attention_<mutant>), on a case the bundled kernel
    passes (test_kernel_follows_the_rule_against_the_per_sequence_oracle): the rule or the
    cache check fails."""
    mutated = getattr(registry, f"kv_cache_attention_{mutant}")
    with pytest.raises(AssertionError, match="2x rule broken|not the expected cache"):
        judge(CASES[KILLERS[mutant]], mutated)


def test_the_answer_buffers_grow_per_device(monkeypatch):
    """value_check's pinned answer buffers: a larger batch on one device replaces that device's
    buffer and its views only; another device's views stay (no pinned memory here: plain)."""
    real_empty = torch.empty
    monkeypatch.setattr(value_check.torch, "empty", lambda *shape, pin_memory=False, **kw: real_empty(*shape, **kw))
    monkeypatch.setattr(value_check.torch, "Event", lambda device: ("event", device.index))
    monkeypatch.setattr(value_check._per_thread, "buffers", {}, raising=False)
    first, second = torch.device("cuda", 0), torch.device("cuda", 1)
    other, _ = value_check._host_buffer(second, 8)
    small, event = value_check._host_buffer(first, 8)
    grown, same_event = value_check._host_buffer(first, 100)
    assert grown.numel() == 100 and small.untyped_storage().data_ptr() != grown.untyped_storage().data_ptr()
    assert same_event == event == ("event", 0)
    assert value_check._host_buffer(second, 8)[0] is other
    assert value_check._host_buffer(first, 8)[0].untyped_storage().data_ptr() == grown.untyped_storage().data_ptr()
