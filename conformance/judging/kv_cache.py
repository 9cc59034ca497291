"""kv_cache_attention's call: a case's padded tensors laid out as a KV cache, and the cache
judged after the call.

A KV-cache case's inputs are drawn like any case's: q (B, H, Sq, D), k and v (B, Hkv, Sk, D),
B = the number of sequences. Sequence b has Sq new queries and a context of L_b keys, the
first L_b rows of its k and v (conformance.cases.variants.sequence_lengths); with `append`,
the last Sq of them are the new tokens' keys and values (k_new, v_new), so the cache holds
cache_seqlens[b] = L_b - Sq before the call, else L_b. The layout (`CacheLayout`, from the
case alone, the same on every machine):

    contiguous  (B, Sk, Hkv, D): sequence b's key j at [b, j]
    paged       (num_pages, page, Hkv, D) and an int32 block table (B, ceil(Sk / page)):
                sequence b's key j at [table[b, j // page], j % page]; pages numbered in
                order, or in a seeded shuffle (`table=shuffled`), or with a prefix of the
                longest cache's pages shared by every sequence whose cache covers them
                (`table=shared`: a common prompt; those sequences' keys there *are* the
                owner's, so the paths attend to `effective` keys)

Every cache slot that holds no key of the context before the call -- past a sequence's cache
length, and where the new tokens go -- holds seeded garbage of the same dtype: a kernel that
reads past a length, or forgets to write a new token, attends to it and fails the rule.

An 8-bit cache (`cache=fp8e4m3`, `cache=fp8e5m2`) holds the keys divided by a per-tensor
power-of-two descale and rounded to fp8, handed over with k_descale/v_descale; the operator
attends to fp8 * descale rounded to the queries' dtype, so that is what the paths take.

The reference paths attend to the effective keys with the context lengths (the varlen
reference: bottom-right causal per sequence). Besides out (and lse), a case is judged on
`cache`: (B, Hkv, Sk) fp32, at each sequence's key position the number of its K and V elements
that are not bit-identical to the expected cache after the call (the new tokens written at
cache_seqlens, nothing else touched). Its reference is 0 everywhere, so one differing bit
fails the rule by far (the floor of an fp32 zero is 2^-24 * 0.3).
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass

import torch

from conformance.cases.catalog import Case
from conformance.cases.inputs import TORCH_DTYPES, generator_seed
from conformance.cases.variants import sequence_lengths
from conformance.judging import returns
from conformance.judging.returns import Returned

# The bits of each cache dtype, to compare caches bit for bit (NaN == NaN, -0.0 != 0.0).
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32}


@dataclass(frozen=True)
class CacheLayout:
    """Where every key of a KV-cache case lives (module doc).

    context: L_b, the keys sequence b attends to; cached: its cache length before the call.
    page_size: keys per page (Sk for a contiguous cache: one page per sequence).
    table: (B, pages per sequence) physical page of each logical page.
    num_pages: physical pages; shared: per sequence, how many leading pages are `owner`'s.
    """

    context: tuple
    cached: tuple
    page_size: int
    table: tuple
    num_pages: int
    shared: tuple
    owner: int

    @property
    def pages_per_sequence(self) -> int:
        return len(self.table[0])


def _hash_order(key: str, count: int) -> list[int]:
    """0 .. count-1 in an order fixed by `key` (blake2b: the same on every machine and Python)."""
    def rank(index: int) -> bytes:
        return hashlib.blake2b(f"{key}|{index}".encode("utf-8"), digest_size=8).digest()
    return sorted(range(count), key=rank)


def _shared_pages(case: Case, cached: tuple, page: int) -> tuple[int, tuple]:
    """(owner, pages each sequence shares with it): half the longest cache's full pages, for
    every sequence whose own cache covers them (its keys there are then the owner's)."""
    owner = max(range(case.batch), key=lambda b: cached[b])
    if case.table != "shared":
        return owner, (0,) * case.batch
    prefix = (cached[owner] // page + 1) // 2
    return owner, tuple(0 if b == owner else min(prefix, cached[b] // page) for b in range(case.batch))


@functools.lru_cache(maxsize=64)
def layout(case: Case) -> CacheLayout:
    """The cache layout of `case` (module doc)."""
    context = sequence_lengths(case)[1]
    cached = tuple(length - case.seq_q for length in context) if case.append else context
    page = case.page or case.seq_k
    per_sequence = math.ceil(case.seq_k / page)
    owner, shared = _shared_pages(case, cached, page)
    own_pages = [(b, p) for b in range(case.batch) for p in range(shared[b], per_sequence)]
    order = (_hash_order(f"{case.data_key}|seed{case.seed}|pages", len(own_pages))
             if case.table == "shuffled" else range(len(own_pages)))
    physical = dict(zip(own_pages, order))
    table = tuple(tuple(physical[(owner if p < shared[b] else b, p)] for p in range(per_sequence))
                  for b in range(case.batch))
    return CacheLayout(context, cached, page, table, len(own_pages), shared, owner)


def _shared_prefix(case: Case, keys: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, Sk, D) keys or values with each shared prefix the owner's."""
    where = layout(case)
    if not any(where.shared):
        return keys
    keys = keys.clone()
    for b, pages in enumerate(where.shared):
        keys[b, :, :pages * where.page_size] = keys[where.owner, :, :pages * where.page_size]
    return keys


def stored(case: Case, keys: torch.Tensor) -> tuple[torch.Tensor, float | None]:
    """(the keys or values as the cache holds them, their descale): the drawn ones with each
    shared prefix the owner's; for an 8-bit cache (`cache_dtype`) divided by a power-of-two
    descale that brings the largest to the top binade of the fp8 format, then rounded to it."""
    keys = _shared_prefix(case, keys)
    if case.cache_dtype is None:
        return keys, None
    dtype = TORCH_DTYPES[case.cache_dtype]
    largest = float(keys.detach().abs().max()) if keys.numel() else 0.0
    descale = 2.0 ** math.ceil(math.log2(largest / torch.finfo(dtype).max)) if largest else 1.0
    return (keys.to(torch.float32) / descale).to(dtype), descale


def effective(case: Case, keys: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, Sk, D) keys or values as the attention sees them, in the queries' dtype: a shared
    prefix is the owner's; an 8-bit cache's are dequantised, fp8 * descale rounded to q's dtype
    (kv_cache_attention's definition)."""
    values, descale = stored(case, keys)
    if descale is None:
        return values
    return (values.to(torch.float32) * descale).to(keys.dtype)


def _slots(case: Case, lengths, device) -> tuple:
    """(batch, position, page, slot) index tensors of every key position j < lengths[b]."""
    where = layout(case)
    counts = torch.tensor(lengths, dtype=torch.int64, device=device)
    batch = torch.repeat_interleave(torch.arange(case.batch, device=device), counts)
    position = torch.arange(batch.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[batch]
    table = torch.tensor(where.table, dtype=torch.int64, device=device)
    page = table[batch, position // where.page_size]
    return batch, position, page, position % where.page_size


def _garbage(case: Case, shape, dtype, device, salt: int) -> torch.Tensor:
    """Seeded values of the cache's dtype for the slots that hold no key before the call."""
    generator = torch.Generator().manual_seed((generator_seed(case) + salt) & (2**63 - 1))
    return torch.randn(shape, generator=generator).mul_(2.0).to(dtype=dtype, device=device)


def _physical(case: Case, keys: torch.Tensor, salt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cache before the call, cache expected after it), each (num_pages, page, Hkv, D)."""
    where = layout(case)
    rows = keys.transpose(1, 2)  # (B, Sk, Hkv, D)
    shape = (where.num_pages, where.page_size, case.kv_heads, case.head_dim)
    cache = _garbage(case, shape, keys.dtype, keys.device, salt)  # the cache's dtype: fp8 too
    batch, position, page, slot = _slots(case, where.cached, keys.device)
    cache[page, slot] = rows[batch, position]
    expected = cache.clone()
    batch, position, page, slot = _slots(case, where.context, keys.device)
    expected[page, slot] = rows[batch, position]
    return cache, expected


def new_tokens(case: Case, keys: torch.Tensor) -> torch.Tensor:
    """(B, Sq, Hkv, D): the keys (values) of each sequence's Sq new tokens, at cache_seqlens."""
    where = layout(case)
    starts = torch.tensor(where.cached, dtype=torch.int64, device=keys.device)
    positions = starts[:, None] + torch.arange(case.seq_q, device=keys.device)[None, :]
    return keys.transpose(1, 2)[torch.arange(case.batch, device=keys.device)[:, None], positions].contiguous()


@dataclass
class CacheCall:
    """One call's return value and its caches: as handed over (mutated in place by the
    call) and as they must be afterwards."""

    returned: object
    caches: tuple      # (k_cache, v_cache) physical, after the call
    expected: tuple    # (k_cache, v_cache) physical, as they must be


def arguments(case: Case, inputs: dict) -> tuple[list, dict, tuple]:
    """(positional, keyword, expected caches) of FlashAttention-2's kvcache call for `case`:
    q (B, Sq, H, D), k_cache, v_cache, cache_seqlens; block_table for a paged cache; k_new,
    v_new with `append`. Options the case does not use are left out."""
    where = layout(case)
    q = inputs["q"]
    (keys, k_descale), (values, v_descale) = (stored(case, inputs[name]) for name in ("k", "v"))
    physical = [_physical(case, tensor, salt) for salt, tensor in enumerate((keys, values), start=1)]
    caches = [cache if case.page else cache.view(case.batch, case.seq_k, case.kv_heads, case.head_dim)
              for cache, _ in physical]
    cache_seqlens = torch.tensor(where.cached, dtype=torch.int32, device=q.device)
    keyword = {}
    if case.page:
        keyword["block_table"] = torch.tensor(where.table, dtype=torch.int32, device=q.device)
    if case.append:
        keyword["k_new"], keyword["v_new"] = (new_tokens(case, tensor) for tensor in (keys, values))
    if case.cache_dtype is not None:
        keyword["k_descale"], keyword["v_descale"] = k_descale, v_descale
    positional = [q.transpose(1, 2).contiguous(), *caches, cache_seqlens]
    return positional, keyword, tuple(expected for _, expected in physical)


def call(function, case: Case, inputs: dict, options: dict) -> CacheCall:
    """Call `function` on the case's cache; `options`: the operator's other keyword arguments."""
    positional, keyword, expected = arguments(case, inputs)
    returned = function(*positional, **keyword, **options)
    caches = tuple(cache.view(expected[0].shape) for cache in positional[1:3])
    return CacheCall(returned, caches, expected)


def differing_elements(case: Case, caches: tuple, expected: tuple) -> torch.Tensor:
    """(B, Hkv, Sk) fp32: per sequence's key position, its K and V elements not bit-identical
    to the expected cache."""
    bits = _BITS[expected[0].element_size()]
    differing = sum((after.view(bits) != wanted.view(bits)).sum(-1)
                    for after, wanted in zip(caches, expected))  # (num_pages, page, Hkv)
    batch, position, page, slot = _slots(case, (case.seq_k,) * case.batch, differing.device)
    per_position = differing.new_zeros((case.batch, case.seq_k, case.kv_heads))
    per_position[batch, position] = differing[page, slot]
    return per_position.transpose(1, 2).to(torch.float32)


def output_names(case: Case) -> list[str]:
    return ["out", "lse", "cache"] if case.lse else ["out", "cache"]


def outputs(case: Case, result: CacheCall, seed_offset: bool = False) -> Returned:
    """out (B, Sq, H, D) transposed to the reference's (B, H, Sq, D); lse (B, H, Sq) as given;
    the cache judged (`differing_elements`). TypeError (the output contract) on a wrong shape."""
    returned = returns.parse(result.returned, [name for name in output_names(case) if name != "cache"])
    out = returned.tensors["out"]
    wanted = (case.batch, case.seq_q, case.heads, case.head_dim)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != wanted:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise TypeError(f"out of kv_cache_attention: expected shape {wanted} (batch, new tokens, heads, "
                        f"head_dim), got {got}")
    returned.tensors["out"] = out.transpose(1, 2)
    returned.tensors["cache"] = differing_elements(case, result.caches, result.expected)
    return returned


def untouched_cache(case: Case, device) -> torch.Tensor:
    """The reference's `cache`: no element differs."""
    return torch.zeros((case.batch, case.kv_heads, case.seq_k), dtype=torch.float32, device=device)
