"""In which order a hunt tries a tier's cases: pairwise coverage per unit of cost.

A fault usually shows only where two things meet -- total attention *and* a
batch of two, GQA *and* more than one kv head, a causal mask *and* Sq > Sk.
So each next case is the one that covers the most not-yet-covered pairs of
traits (below; FlashAttention-2's variants among them: window, softcap, ALiBi,
varlen lengths) per unit of estimated cost: within a few cases every feature has
met every other at least once, cheaply.  Cases that add no new pair follow,
cheapest first.  The order is deterministic.
"""

from __future__ import annotations

import heapq
import itertools

from conformance.cases.catalog import Case

_TILE = 16  # the smallest tile any backend profile uses: lengths off this grid are ragged


def _relation(a: int, b: int) -> str:
    return "<" if a < b else ("=" if a == b else ">")


def traits(case: Case) -> dict:
    """What a case exercises, as (name -> value)."""
    return {
        "op": case.op, "direction": case.direction, "dtype": case.dtype, "head_dim": case.head_dim,
        "causal": case.causal, "lse": case.lse, "total": case.total, "dropout": bool(case.dropout),
        "layout": case.layout, "bad_input": case.bad_input, "batched": case.batch > 1,
        "multi_kv_heads": case.kv_heads > 1, "grouped": case.heads > case.kv_heads,
        "seq_q_vs_seq_k": _relation(case.seq_q, case.seq_k),
        "ragged": case.seq_q % _TILE != 0 or case.seq_k % _TILE != 0,
        "single": case.seq_q == 1 or case.seq_k == 1,
        "values": (case.values or "normal").partition(":")[0],  # the input distribution's kind
        # FlashAttention-2's variants: a sliding window, a soft cap, ALiBi slopes (H,) or (B, H),
        # a varlen case's length pattern (None for a dense case)
        "window": case.window is not None, "softcap": bool(case.softcap), "alibi": case.alibi,
        "lens": case.lens,
    }


def trait_pairs(case: Case) -> frozenset:
    return frozenset(itertools.combinations(sorted(traits(case).items(), key=lambda item: item[0]), 2))


def case_cost(case: Case) -> float:
    """A relative cost estimate: score-matrix work times head dim; the backward (three
    kernels plus a pre-pass) about three forwards.  A planted NaN/Inf case counts
    four times: the rule judges it only where the bad value does not reach, so its
    kill is weaker evidence and it is tried after ordinary cases of the same traits."""
    work = case.batch * case.heads * max(case.seq_q, 64) * max(case.seq_k, 64) * max(case.head_dim, 32)
    factor = 3.0 if case.direction == "bwd" else 1.0
    factor *= 2.0 if case.op == "piecewise_attention" else 1.0
    factor *= 1.5 if case.dropout else 1.0
    factor *= 4.0 if case.bad_input else 1.0
    return work * factor


def coverage_order(cases: list[Case]) -> list[Case]:
    """`cases` reordered greedily by new trait pairs per unit of cost (lazy greedy:
    a case's gain only shrinks as others are taken, so a stale gain is an upper bound)."""
    pairs = [trait_pairs(case) for case in cases]
    costs = [case_cost(case) for case in cases]
    heap = [(-len(pairs[i]) / costs[i], i) for i in range(len(cases))]
    heapq.heapify(heap)
    covered: set = set()
    order = []
    while heap:
        _, index = heapq.heappop(heap)
        gain = len(pairs[index] - covered)
        if gain == 0:
            continue  # adds nothing new: goes to the cost-ordered rest
        if heap and -heap[0][0] > gain / costs[index]:
            heapq.heappush(heap, (-gain / costs[index], index))
            continue
        covered |= pairs[index]
        order.append(index)
    taken = set(order)
    rest = sorted((i for i in range(len(cases)) if i not in taken), key=lambda i: (costs[i], i))
    return [cases[i] for i in order + rest]
