"""What a run judged under an implementation's declared conventions, for every report format:
one sentence per convention with the number of cases it changed (the lines' `conventions`,
conformance.judging.conventions)."""

from __future__ import annotations

from collections import Counter

from conformance.judging.conventions import DESCRIPTIONS
from conformance.reporting.summary import CASE, of_kind


def convention_sentences(lines: list[dict]) -> list[str]:
    """'fp32 judged as TF32 (declared) ...: 14 cases.' for each convention a case was judged under."""
    counts = Counter((name, value) for line in of_kind(lines, CASE)
                     for name, value in (line.get("conventions") or {}).items())
    return [f"{DESCRIPTIONS.get(key, f'{key[0]} = {key[1]} (declared)')}: {count} case{'s' if count != 1 else ''}."
            for key, count in sorted(counts.items())]
