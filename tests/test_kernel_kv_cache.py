"""kv_cache_attention on the interpreter (issue 34): the kernels against the per-sequence oracle
(tests/kv_cache_oracle.py) by the 2x rule, the append, the merge's blocks of splits, strided
inputs; and, for each of the operator's mutants, a case that kills it."""

import pytest
import torch

from conformance.backends import activate

activate()  # must precede `import kernels` (sets TRITON_INTERPRET=1 on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import decode_plan, tuning  # noqa: E402
from conformance.bundled.kernels import launch as kernels_launch  # noqa: E402
from conformance.bundled.mutants import registry  # noqa: E402
from kv_cache_oracle import CASES, FP16, FP32, NAN, Case, Layout, inputs_of, judge  # noqa: E402


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
