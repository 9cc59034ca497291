"""kv_cache_attention's launches (kernels.decode_plan, kernels.kv_cache): the split heuristic,
the launch plan made once per signature, one split without a merge, a contiguous cache read
without a table, the checks of a signature seen before, and every target's launch configurations."""

import pytest
import torch

from conformance.backends import activate

activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import decode_plan, tuning, tuning_space  # noqa: E402
from conformance.bundled.kernels.targets import INTERPRETER, Target  # noqa: E402
from kv_cache_oracle import bits, valid_arguments  # noqa: E402


@pytest.mark.parametrize("paged", [False, True])
def test_only_a_paged_cache_s_kernels_read_a_block_table(monkeypatch, paged):
    """The append and split kernels are told whether the cache is paged (the merge reads no
    cache; the values' check launches from kernels.value_check, not seen here); a contiguous
    cache's kernels address it by position alone (kernels.decode_cache.cache_slots)."""
    from conformance.bundled.kernels import kv_cache

    flags, real_launch = [], kv_cache.launch
    monkeypatch.setattr(kv_cache, "launch", lambda kernel, *args, **kwargs: (
        flags.append(kwargs.get("PAGED")), real_launch(kernel, *args, **kwargs))[1])
    args = valid_arguments(paged=paged)
    batch, kv_heads, dim = 2, args["k_cache"].shape[2], args["q"].shape[3]
    new = torch.zeros((batch, args["q"].shape[1], kv_heads, dim), dtype=args["q"].dtype)
    kernels.kv_cache_attention(**args, k_new=new, v_new=new.clone(), num_splits=2)
    assert flags[:2] == [paged, paged]  # the append, then the split (the merge has no cache to read)
    assert all(flag in (paged, None) for flag in flags)


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


def _tiles(config) -> tuple:
    return config.block_n, config.num_warps, config.num_stages


@pytest.mark.parametrize("target", [Target("cuda", 90, 32), Target("hip", "gfx942", 64)])
def test_a_paged_batch_that_fills_the_device_in_one_split_takes_the_filled_paged_tiles(target):
    """Hopper's tables hold a decode_split row for a paged cache whose call has one split and
    FILLED_PROGRAMS_PER_PROCESSOR programs a processor or more (kernels.decode_plan); a
    contiguous cache, fewer programs, a call of several splits, and a table set without the
    row (CDNA's) keep the general row.  No GPU here: the stand-in processors are filled."""
    filled = decode_plan.FILLED_PROGRAMS_PER_PROCESSOR * decode_plan.STAND_IN_PROCESSORS

    def tiles(slices, paged, requested=0):
        plan = decode_plan.launch_plan(torch.float16, 128, slices, 8, 1024, requested, False, paged,
                                       torch.device("cpu"), target)
        assert plan.split["BLOCK_N"] == plan.split_config.block_n
        return _tiles(plan.split_config)

    general = _tiles(tuning.launch_config("decode_split", 128, "fp16", target))
    tables = tuning.launch_tables(target)
    expected = _tiles(tables["decode_split.filled_paged"].pick(128)) if "decode_split.filled_paged" in tables \
        else general
    assert (expected != general) == (target.backend == "cuda")
    assert tiles(filled, paged=True) == tiles(filled, paged=True, requested=1) == expected
    assert tiles(filled, paged=False) == general
    assert tiles(filled - 1, paged=True) == general
    assert tiles(filled, paged=True, requested=2) == general


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
