"""How an implementation hands back its forward outputs: the return conventions.

With no extra output asked for, `flash_attention` returns `out` alone. With extras
(`return_log_normalizer`, `return_total_attention`) two conventions are in use, and
both are accepted:

    compact       only the requested tensors, in order: (out, lse), (out, total), (out, lse, total)
                  (the bundled kernels)
    placeholders  always (out, lse or None, total or None)  (FlagAttention)

FlagAttention in fact returns five values whenever an extra is asked for:
(out, lse|None, total|None, seed|None, offset|None); the last two are its dropout RNG
state, given with `return_seed_offset=True` (the harness asks for it from kernels that
own their dropout RNG, conformance.judging.dropout), and are None otherwise. Compact kernels
asked for the RNG state append `(seed, offset)` likewise. When every extra is requested
without the RNG slots, the two conventions are the same tuple; that is recorded as "full".

The convention seen is recorded in each results line (`return_convention`) and counted
in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPACT, PLACEHOLDERS, FULL = "compact", "placeholders", "full"
# How an error line's reason starts when the implementation broke the output contract.
CONTRACT_PREFIX = "output contract: "
EXTRAS = ("lse", "total")  # the optional outputs, in placeholder order


@dataclass
class Returned:
    """What one call gave back: tensors by name, the convention, and (seed, offset) if asked."""

    tensors: dict
    convention: str | None = None
    seed_offset: tuple | None = None


def _describe(result) -> str:
    if isinstance(result, (tuple, list)):
        return f"a {len(result)}-tuple ({', '.join(type(item).__name__ for item in result)})"
    return type(result).__name__


def _expected(wanted: list[str], seed_offset: bool) -> str:
    tail = ", seed, offset" if seed_offset else ""
    compact = f"({', '.join(wanted)}{tail})"
    placeholders = "(out, " + ", ".join(f"{name} or None" for name in EXTRAS) + f"{tail})"
    return compact if compact == placeholders else f"{compact} or FlagAttention's {placeholders}"


def parse(result, wanted: list[str], seed_offset: bool = False) -> Returned:
    """The named tensors of `result`, for a call that asked for `wanted` (out first, then
    requested extras) and, if `seed_offset`, for the dropout RNG state; TypeError
    saying what was expected and what came back."""
    if wanted == ["out"] and not seed_offset:
        if isinstance(result, (tuple, list)):
            raise TypeError(f"expected the output tensor alone, got {_describe(result)}")
        return Returned({"out": result})
    if not isinstance(result, (tuple, list)):
        raise TypeError(f"expected {_expected(wanted, seed_offset)}, got {_describe(result)}")
    items = list(result)
    rng, rng_slots = None, False
    if seed_offset:
        if len(items) < 3:
            raise TypeError(f"expected {_expected(wanted, seed_offset)}, got {_describe(result)}")
        items, rng = items[:-2], tuple(items[-2:])
    elif len(items) == 3 + len(EXTRAS) and items[-2:] == [None, None]:
        items, rng_slots = items[:-2], True  # FlagAttention's five values, (seed, offset) not asked for
    if len(items) == len(wanted):
        convention = FULL if len(wanted) == 1 + len(EXTRAS) else COMPACT
        convention = PLACEHOLDERS if rng_slots else convention
        return Returned(dict(zip(wanted, items)), convention, rng)
    if len(items) == 1 + len(EXTRAS):
        placed = dict(zip(("out", *EXTRAS), items))
        stray = [name for name in EXTRAS if name not in wanted and placed[name] is not None]
        missing = [name for name in wanted if placed[name] is None]
        if not stray and not missing:
            return Returned({name: placed[name] for name in wanted}, PLACEHOLDERS, rng)
        problem = (f"{missing[0]} is None though requested" if missing
                   else f"{stray[0]} is given though not requested (a placeholder must be None)")
        raise TypeError(f"expected {_expected(wanted, seed_offset)}, got {_describe(result)}: {problem}")
    raise TypeError(f"expected {_expected(wanted, seed_offset)}, got {_describe(result)}")
