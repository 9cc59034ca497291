"""A case's FlashAttention-2 variants as call arguments: what the implementation is given,
what the reference paths are given, and what they change in the rule's floor.

The implementation gets an argument only when the case uses it (window_size, softcap,
alibi_slopes), so a kernel without those features still runs every other case. The
reference paths get the same variants, plus the per-sequence lengths of a variable-length
case (`seq_lens`), which the implementation sees as cu_seqlens (conformance.judging.varlen).
"""

from __future__ import annotations

import torch

from conformance.cases.catalog import Case
from conformance.cases.variants import alibi_slope_values, sequence_lengths, visible_keys


def alibi_slopes(case: Case, device) -> torch.Tensor | None:
    """The slopes the case hands over: fp32 (H,) for `alibi`, (B, H) for `alibi_bh`; None without."""
    if case.alibi is None:
        return None
    slopes = torch.tensor(alibi_slope_values(case), dtype=torch.float32, device=device)
    return slopes[0] if case.alibi == "h" else slopes


def kernel_options(case: Case, device) -> dict:
    """The variant keyword arguments of the implementation's call, only those the case uses."""
    options = {}
    if case.window is not None:
        options["window_size"] = case.window
    if case.softcap:
        options["softcap"] = case.softcap
    if case.alibi is not None:
        options["alibi_slopes"] = alibi_slopes(case, device)
    return options


def reference_options(case: Case, device) -> dict:
    """The variant keyword arguments of reference.attention_forward / _backward / _delta_noise."""
    options = {}
    if case.window is not None:
        options["window"] = case.window
    if case.softcap:
        options["softcap"] = case.softcap
    if case.alibi is not None:
        options["alibi_slopes"] = alibi_slopes(case, device)
    if case.lens is not None:
        options["seq_lens"] = tuple(torch.tensor(lengths, dtype=torch.int64, device=device)
                                    for lengths in sequence_lengths(case))
    return options


def alibi_reach(case: Case) -> float:
    """How far ALiBi moves a row's scores at its nearest visible key: max over (b, h) of
    slope * the largest distance from a row's diagonal (i + off) to the nearest key it sees.

    Why the floor needs it: a row's softmax terms that matter lie within exp's range of the
    row max, which ALiBi pulls down by that bias; lse and the exponents exp(s - lse) of the total
    attention are then of that size, and fp32 rounds them there, not at the unbiased scores'
    size (a row far from every key, non-causal Sq > Sk: bias ~ slope * (Sq - Sk)). 0 without ALiBi.
    The distance to the interval of seen keys is convex in the row, so over the rows that
    see a key (an interval of rows) it is largest at their first or last row."""
    if case.alibi is None:
        return 0.0
    slopes = alibi_slope_values(case)
    reach = 0.0
    for b, (seq_q, seq_k) in enumerate(zip(*sequence_lengths(case))):
        distance = 0
        for row in _rows_that_see_keys(seq_q, seq_k, case):
            first, last = visible_keys(row, seq_q, seq_k, case.causal, case.window)
            position = row + seq_k - seq_q
            distance = max(distance, first - position, position - last)
        reach = max(reach, max(slopes[b % len(slopes)]) * distance)
    return reach


def _rows_that_see_keys(seq_q: int, seq_k: int, case: Case) -> list[int]:
    """The first and the last query row that see a key (none without rows or keys). The last
    row's diagonal is key Sk - 1, which every window and the causal mask keep, and the rows that
    see a key form an interval (conformance.cases.variants): the first is found by bisection."""
    if seq_q == 0 or seq_k == 0:
        return []

    def sees(row: int) -> bool:
        first, last = visible_keys(row, seq_q, seq_k, case.causal, case.window)
        return first <= last

    low, high = 0, seq_q - 1
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if sees(middle) else (middle + 1, high)
    return [low, seq_q - 1]
