"""kv_cache_attention's bad input: every argument error named before any launch, and the
values' check (kernels.value_check): lengths and table entries that leave the cache raise, after
the kernels are queued, with nothing read or written out of bounds."""

import math

import pytest
import torch

from conformance.backends import activate

activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import value_check  # noqa: E402
from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402
from kv_cache_oracle import E4M3, FP16, bits, draw, valid_arguments  # noqa: E402


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
