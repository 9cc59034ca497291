"""`--kernel` targets for the mutants: `conformance.bundled.mutants.registry:<op>_<mutant name>`.

    python -m conformance run \\
        --kernel flash_attention=conformance.bundled.mutants.registry:flash_attention_lse_log2 \\
        --kernel piecewise_attention=conformance.bundled.mutants.registry:piecewise_attention_lse_log2

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


def __getattr__(attribute: str):
    for op in OPS:
        mutant = BY_NAME.get(attribute.removeprefix(f"{op}_")) if attribute.startswith(f"{op}_") else None
        if mutant is not None:
            return getattr(load(mutant), op)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r} "
                         f"(expected <op>_<mutant>, op in {', '.join(OPS)}, mutant in {', '.join(BY_NAME)})")
