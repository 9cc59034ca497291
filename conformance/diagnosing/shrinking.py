"""The smallest case that still fails: a greedy, deterministic search over smaller shapes.

Like Hypothesis' shrinker, but over a case's sizes only: batch, heads and kv heads (as a
head count, a group size and a kv-head count, so GQA stays GQA while it matters), the two
sequence lengths and the head dim (within what the backend profile supports). dtype, mask,
features and seed are kept: they are the fault's context, not its size.

Each round tries, axis by axis, the axis' smaller values from the smallest up and keeps
the first candidate that still fails; rounds repeat until one changes nothing, or the time
budget is spent (the best case found so far is then the answer, and says so). A candidate
"still fails" when its rule verdict is one of the original's failing kind: fail or
nonfinite for a numerical failure, error for an error. The order of candidates is fixed,
so two searches with enough budget end on the same case.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator, NamedTuple

from conformance.cases.catalog import Case
from conformance.judging import verdicts

NUMERICAL = frozenset({verdicts.FAIL, verdicts.NONFINITE})
# Head dims tried, smallest first (each only if the profile supports it).
HEAD_DIMS = (16, 32, 48, 64, 80, 96, 128, 192)
# Sequence lengths tried besides halving and one less: small fixed sizes a tile sees
# whole, and their ragged neighbours.
LENGTHS = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)


class Shrunk(NamedTuple):
    case: Case
    tried: int
    seconds: float
    complete: bool  # False when the budget ran out before a round changed nothing


def still_fails(original: str) -> frozenset:
    """The rule verdicts that count as the same failure as `original`'s."""
    return NUMERICAL if original in NUMERICAL else frozenset({original})


def cost(case: Case) -> int:
    """The size ordering of the search: score-matrix elements times head dim."""
    return case.batch * case.heads * case.seq_q * case.seq_k * case.head_dim


def _lengths(n: int) -> list[int]:
    return sorted({x for x in (*LENGTHS, n // 4, n // 2, n - 1) if 1 <= x < n})


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n) if n % d == 0]


def smaller(case: Case) -> Iterator[Case]:
    """Valid smaller variants of `case`, axis by axis, smallest value first."""
    group = case.heads // case.kv_heads
    variants = [dict(batch=b) for b in _lengths(case.batch)]
    variants += [dict(kv_heads=kv, heads=kv * group) for kv in _divisors(case.kv_heads)]
    variants += [dict(heads=case.kv_heads * g) for g in _divisors(group)]
    variants += [dict(kv_heads=kv) for kv in _divisors(case.kv_heads)]
    variants += [dict(seq_q=n) for n in _lengths(case.seq_q)]
    variants += [dict(seq_k=n) for n in _lengths(case.seq_k)]
    variants += [dict(head_dim=d) for d in HEAD_DIMS if d < case.head_dim]
    for change in variants:
        try:
            yield dataclasses.replace(case, **change)
        except ValueError:  # e.g. kv heads that no longer divide heads
            continue


def shrink(case: Case, rule_verdict: Callable[[Case], str], supported: Callable[[Case], bool],
           budget_s: float, original: str, clock=time.monotonic) -> Shrunk:
    """Search from `case` (whose rule verdict was `original`) for the smallest case whose
    `rule_verdict` still fails; `supported` filters candidates (the backend's profile)."""
    wanted, started, tried = still_fails(original), clock(), 0
    best, changed = case, True
    while changed:
        changed = False
        for candidate in smaller(best):
            if clock() - started > budget_s:
                return Shrunk(best, tried, clock() - started, complete=False)
            if cost(candidate) >= cost(best) or not supported(candidate):
                continue
            tried += 1
            if rule_verdict(candidate) in wanted:
                best, changed = candidate, True
                break
    return Shrunk(best, tried, clock() - started, complete=True)
