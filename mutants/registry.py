"""`--kernel` targets for the mutants: `conformance.bundled.mutants.registry:<op>_<mutant name>`.

    python -m conformance run \\
        --kernel flash_attention=conformance.bundled.mutants.registry:flash_attention_lse_log2 \\
        --kernel piecewise_attention=conformance.bundled.mutants.registry:piecewise_attention_lse_log2 \\
        --kernel flash_attention_varlen=conformance.bundled.mutants.registry:flash_attention_varlen_lse_log2

`kernel_specs(name)` gives one spec per operator of the catalog, so a mutant is judged
through every operator, flash_attention_varlen included.  An attribute name is looked up
exactly among the (operator, mutant) pairs, never by its first matching prefix: two mutants
`x` and `varlen_x` would both be named `flash_attention_varlen_x`, and are refused.

Each attribute is created on first access by materialising and importing the
mutant's package (import this after conformance.backends.activate(), as the
harness does): the mutant's operator, which carries `dropout_keep_mask` like the
bundled one.
"""

from __future__ import annotations

from conformance.cases.catalog import OPS
from conformance.bundled.mutants.definitions import BY_NAME
from conformance.bundled.mutants.transform import load


def attribute_name(op: str, mutant_name: str) -> str:
    return f"{op}_{mutant_name}"


def kernel_specs(mutant_name: str) -> list[str]:
    """The `--kernel` specs that judge mutant `mutant_name` in place of every bundled operator."""
    return [f"{op}={__name__}:{attribute_name(op, mutant_name)}" for op in OPS]


def _attributes() -> dict[str, tuple[str, str]]:
    """attribute name -> (op, mutant name), for every operator and mutant; ValueError if two
    pairs share a name (e.g. mutants `x` and `varlen_x`: flash_attention_varlen_x is both)."""
    attributes: dict[str, tuple[str, str]] = {}
    for op in OPS:
        for name in BY_NAME:
            attribute = attribute_name(op, name)
            if attribute in attributes:
                raise ValueError(f"mutant registry: {attribute} names both {attributes[attribute]} and "
                                 f"{(op, name)}: rename one of the mutants")
            attributes[attribute] = (op, name)
    return attributes


def __getattr__(attribute: str):
    attributes = _attributes()  # at each look-up: BY_NAME may gain mutants (tests add some)
    if attribute in attributes:
        op, name = attributes[attribute]
        return getattr(load(BY_NAME[name]), op)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r} "
                         f"(expected <op>_<mutant>, op in {', '.join(OPS)}, mutant in {', '.join(BY_NAME)})")
