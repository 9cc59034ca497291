"""Deterministic shards of a selection: `run --shard K/N` runs the K-th of N disjoint
parts of whatever the other options select, the same parts on every machine and
Triton version, balanced by each case's expected cost rather than by count.

The cost model is the catalog's sizes: a case's matmul work (B * H * Sq * Sk * D,
x2.5 for a backward, which also runs the forward) plus a fixed overhead per case (its
reference, its torch path, a compile when it is the first of its kind).  Cases are
dealt largest first, each to the shard with the least cost so far (ties: the lower
shard, then the case id), so the partition is a pure function of the selected ids.
"""

from __future__ import annotations

import re

from conformance.cases.catalog import Case

_SHARD = re.compile(r"(\d+)/(\d+)")
# Fixed cost of one case, in the same unit as its matmul work: about what a
# 2 x 8 x 128 x 128 x 64 case's kernels, reference and torch path cost together.
_OVERHEAD = 2.0e8


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """(K, N) of `K/N` with 1 <= K <= N; None for no shard; ValueError naming --shard."""
    if text is None:
        return None
    match = _SHARD.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"--shard: expected K/N such as 2/4, got {text!r}")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ValueError(f"--shard: K must be between 1 and N, got {index}/{count}")
    return index, count


def case_cost(case: Case) -> float:
    """Expected relative cost of running and judging `case`."""
    work = case.batch * case.heads * case.seq_q * case.seq_k * case.head_dim
    return _OVERHEAD + work * (2.5 if case.direction == "bwd" else 1.0)


def shard_of_each(cases: list[Case], count: int) -> dict[str, int]:
    """case id -> its shard (1 .. count), largest cost first to the least loaded shard."""
    loads = [0.0] * count
    owner = {}
    for case in sorted(cases, key=lambda c: (-case_cost(c), c.id)):
        shard = min(range(count), key=lambda index: (loads[index], index))
        loads[shard] += case_cost(case)
        owner[case.id] = shard + 1
    return owner


def sharded(cases: list[Case], shard: tuple[int, int] | None) -> list[Case]:
    """The cases of shard (K, N), in their selection order; all cases for None."""
    if shard is None:
        return list(cases)
    index, count = shard
    owner = shard_of_each(cases, count)
    return [case for case in cases if owner[case.id] == index]
