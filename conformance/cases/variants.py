"""FlashAttention-2's attention variants as a case states them, without torch: which keys a
query row sees (window, causal), the per-sequence lengths of a variable-length case, and
the ALiBi slopes. `conformance.judging` turns these into tensors; the catalog, the declared
capabilities and the conventions read them to know what a case contains (rows that see no
key, sequences whose query and key lengths differ) before anything runs.

Visibility (FlashAttention-2's, the operators' contract): with the sequence's diagonal
offset off = Sk - Sq, query i sees key j iff

    i + off - left <= j <= i + off + right      (window (left, right); -1 = unbounded side)
    j <= i + off                                (causal, bottom-right: right = min(right, 0))

A variable-length case (`Case.lens`) is a batch of `batch` sequences whose query and key
lengths are at most Sq and Sk (the case's max lengths, which at least one sequence reaches);
each sequence is its own dense problem, masks aligned bottom-right per sequence. The lengths
are drawn from the case's data key and seed with a hash (the same on every machine and
Python version), so a case id fixes them:

    equal    every sequence has Sq queries and Sk keys (the dense batch, packed)
    paired   len_q = len_k per sequence (self-attention of ragged documents; needs Sq == Sk)
    mixed    len_q and len_k drawn independently in [0, Sq] and [0, Sk]

A KV-cache case (kv_cache_attention) is a batch of `batch` sequences, each with Sq new queries
and a context of at most Sk keys: `equal` gives every sequence Sk keys, `mixed` draws the
context lengths (`_context_lengths`).

`paired` and `mixed` plant the lengths that break kernels, as many as the batch holds, at
hash-chosen positions: the max lengths first, then a sequence with no keys (its rows see
no key: out 0, lse -inf), one with no queries (two equal offsets in cu_seqlens_q), one
query, one key.
"""

from __future__ import annotations

import functools
import hashlib

KV_CACHE_OP = "kv_cache_attention"  # conformance.cases.catalog's; the catalog imports this module

LENGTH_PATTERNS = ("equal", "paired", "mixed", "nonempty")


def _draw(key: str, index: int, what: str, upper: int) -> int:
    """A deterministic integer in [0, upper] for (key, index, what)."""
    digest = hashlib.blake2b(f"{key}|{index}|{what}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (upper + 1)


def _planted_positions(key: str, batch: int) -> list[int]:
    """The batch positions in a hash order: the special lengths go to the first ones."""
    return sorted(range(batch), key=lambda index: _draw(key, index, "position", 2**62))


@functools.lru_cache(maxsize=256)  # asked for by the call, the paths, the floor and the checks
def sequence_lengths(case) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(query lengths, key lengths) of each sequence of a variable-length case (module doc);
    the dense case's own (Sq, Sk) for every batch entry of any other case."""
    batch, seq_q, seq_k = case.batch, case.seq_q, case.seq_k
    if case.lens in (None, "equal"):
        return (seq_q,) * batch, (seq_k,) * batch
    key = f"{case.data_key}|seed{case.seed}"
    if case.op == KV_CACHE_OP:
        return (seq_q,) * batch, _context_lengths(case, key)
    if case.lens == "paired":
        lengths = [_draw(key, b, "len", seq_q) for b in range(batch)]
        planted = [seq_q, 0, 1]
        for position, length in zip(_planted_positions(key, batch), planted):
            lengths[position] = length
        return tuple(lengths), tuple(lengths)
    queries = [_draw(key, b, "len_q", seq_q) for b in range(batch)]
    keys = [_draw(key, b, "len_k", seq_k) for b in range(batch)]
    # (query length, key length) to plant; None keeps that sequence's own draw
    planted = [(seq_q, seq_k), (None, 0), (0, None), (1, None), (None, 1)]
    for position, (length_q, length_k) in zip(_planted_positions(key, batch), planted):
        if length_q is not None:
            queries[position] = length_q
        if length_k is not None:
            keys[position] = length_k
        if length_k == 0:
            queries[position] = max(1, queries[position])  # rows that see no key need rows
    return tuple(queries), tuple(keys)


def _context_lengths(case, key: str) -> tuple[int, ...]:
    """A KV-cache case's context lengths (the keys each sequence attends to), `mixed`: drawn in
    [shortest, Sk], where shortest is Sq when the call appends Sq new tokens (an empty cache
    then), else 0; planted: the full cache, with a window or causal mask the lengths that put a
    band edge on a tile border (`_band_edge_lengths`), the shortest, one more than the shortest (a cache
    of one token), and one just past a power of two (the first key of a fresh tile).
    `nonempty`: the same with every sequence seeing at least one key (a serving engine's
    decode step always has its own token cached; some kernels divide by zero otherwise)."""
    shortest = case.seq_q if case.append else (1 if case.lens == "nonempty" else 0)
    lengths = [shortest + _draw(key, b, "context", case.seq_k - shortest) for b in range(case.batch)]
    just_past_tile = (1 << max(0, (case.seq_k - 1).bit_length() - 1)) + 1
    planted = [min(case.seq_k, length) for length in (case.seq_k, *_band_edge_lengths(case, shortest), shortest,
                                                      shortest + 1, max(shortest, just_past_tile))]
    for position, length in zip(_planted_positions(key, case.batch), planted):
        lengths[position] = length
    return tuple(lengths)


def _band_edge_lengths(case, shortest: int) -> list[int]:
    """Context lengths L at which the first of a sequence's Sq new tokens has a band edge on a
    tile border for every power-of-two tile up to P (the largest that fits the cache): its
    first key L - Sq - left the last key of a tile (a window's left edge), or its last key + 1,
    L - Sq + right + 1, the first of one (right 0 for causal).  The later tokens' edges lie
    Sq - 1 keys on, in the next tile: a kernel that bounds a row tile's key tiles by the wrong
    token's band (an edge rounded, or taken from the first or the last row) loses or adds a
    whole tile there, whatever its tile size; drawn lengths show it for Sq - 1 of every tile's
    residues.  None for one new token (a row tile's tokens share one band) or a right edge
    that the cache's end clips for every token."""
    left, right = case.window if case.window is not None else (-1, -1)
    if case.causal:
        right = 0  # a causal mask ends every token's band at its own position, whatever the window
    if case.seq_q < 2:
        return []
    below_edge = ([case.seq_q + left - 1] if left >= 0 else []) + \
        ([case.seq_q - right - 1] if 0 <= right < case.seq_q - 1 else [])
    lengths = []
    for before in below_edge:
        room = case.seq_k - before
        if room < 1:
            continue
        length = before + (1 << (room.bit_length() - 1))  # before + P
        if length >= shortest:
            lengths.append(length)
    return lengths


def visible_keys(row: int, seq_q: int, seq_k: int, causal: bool, window, top_left: bool = False):
    """(first, last) key that query `row` of one (seq_q, seq_k) problem sees; first > last
    when it sees none. `top_left`: a declared top-left causal mask (j <= i)."""
    offset = seq_k - seq_q
    first, last = 0, seq_k - 1
    if causal:
        last = min(last, row + (0 if top_left else offset))
    if window is not None:
        left, right = window
        if left >= 0:
            first = max(first, row + offset - left)
        if right >= 0:
            last = min(last, row + offset + right)
    return first, last


def sees_no_key_somewhere(seq_q: int, seq_k: int, causal: bool, window, top_left: bool = False) -> bool:
    """Whether some query row of one (seq_q, seq_k) problem sees no key. first(i) - last(i)
    is convex in i (a max of linear functions minus a min of them), so its largest value is
    at the first or the last row: two rows decide."""
    if seq_q == 0:
        return False
    return any(first > last for first, last in
               (visible_keys(row, seq_q, seq_k, causal, window, top_left) for row in (0, seq_q - 1)))


def has_empty_rows(case, top_left: bool = False) -> bool:
    """Whether some (real) query row of `case` sees no key: out 0, lse -inf, no gradient."""
    pairs = set(zip(*sequence_lengths(case)))
    return any(sees_no_key_somewhere(sq, sk, case.causal, case.window, top_left) for sq, sk in pairs)


def has_unequal_lengths(case) -> bool:
    """Whether some sequence of `case` has a different number of queries and keys (Sq != Sk)."""
    return any(sq != sk for sq, sk in zip(*sequence_lengths(case)))


def standard_alibi_slopes(heads: int) -> list[float]:
    """The standard geometric ALiBi slopes 2^(-8 (h + 1) / H) of heads h = 0 ... H-1 (Press et al.)."""
    return [2.0 ** (-8.0 * (head + 1) / heads) for head in range(heads)]


def alibi_slope_values(case) -> list[list[float]]:
    """The case's ALiBi slopes as (batch, heads) rows of floats: the standard geometric
    slopes 2^(-8 (h + 1) / H) of head h; per batch (`alibi == "bh"`) each sequence b has them
    rotated by b heads, so a kernel that reads slope[h] instead of slope[b, h] is wrong for
    every b > 0 while the slopes keep their realistic range."""
    heads = case.heads
    base = standard_alibi_slopes(heads)
    if case.alibi == "bh":
        return [[base[(head + b) % heads] for head in range(heads)] for b in range(case.batch)]
    return [base]


def modifies_scores(case) -> bool:
    """Whether the case's scores are not plain scaled q.k (masks aside): softcap or ALiBi."""
    return bool(case.softcap) or case.alibi is not None
