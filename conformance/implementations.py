"""Which implementation of each operator a run judges: bundled, or the user's own.

By default an operator `op` is `kernels.<op>` (the bundled Triton kernels). A
`--kernel op=package.module:function` spec replaces it with any callable of the
same signature, importable from the current directory:

    flash_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False)

Only bundled kernels are run under `kernels.poisoned_outputs()` (NaN-filled
outputs, so unwritten elements show up as `nonfinite`): the harness cannot reach
into another implementation's allocations.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shlex
import sys
from dataclasses import dataclass, field

from conformance.catalog import OPS

BUNDLED_MODULE = "kernels"
_SPEC = re.compile(r"(?P<op>\w+)=(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)")


@dataclass(frozen=True)
class Implementations:
    """op -> "module:function", with the user's `--kernel` overrides remembered
    so reproduce commands can repeat them."""

    overrides: dict = field(default_factory=dict)

    @classmethod
    def from_specs(cls, specs) -> "Implementations":
        """Parse `op=package.module:function` specs; ValueError naming --kernel if bad."""
        overrides = {}
        for spec in specs or ():
            match = _SPEC.fullmatch(spec.strip())
            if not match:
                raise ValueError(f"argument --kernel: expected op=package.module:function, got {spec!r}")
            if match["op"] not in OPS:
                raise ValueError(f"argument --kernel: unknown op {match['op']!r} (known: {', '.join(OPS)})")
            if match["op"] in overrides:
                raise ValueError(f"argument --kernel: {match['op']} given twice")
            overrides[match["op"]] = f"{match['module']}:{match['function']}"
        return cls(overrides)

    def name(self, op: str) -> str:
        """What runs for `op`, e.g. `kernels:flash_attention` or `mypkg.attn:fa`."""
        return self.overrides.get(op, f"{BUNDLED_MODULE}:{op}")

    def is_bundled(self, op: str) -> bool:
        return op not in self.overrides

    def resolve(self, op: str):
        """Import and return the callable for `op` (call after backends.activate())."""
        module_name, _, function_name = self.name(op).partition(":")
        if not self.is_bundled(op) and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # "importable from the current directory"
        module = importlib.import_module(module_name)
        try:
            return getattr(module, function_name)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {function_name!r}") from None

    def launch_context(self, op: str):
        """Context manager to launch `op` in: NaN-poisoned outputs for bundled kernels."""
        if not self.is_bundled(op):
            return contextlib.nullcontext()
        return importlib.import_module(BUNDLED_MODULE).poisoned_outputs()

    def cli_args(self) -> list[str]:
        """The `--kernel` arguments that select these implementations again."""
        return [arg for op, target in self.overrides.items() for arg in ("--kernel", f"{op}={target}")]

    def describe(self) -> dict:
        """op -> implementation name, for every known op (for env.json)."""
        return {op: self.name(op) for op in OPS}


def reproduce_command(case_id: str, backend: str | None, implementations: Implementations,
                      extra_args=()) -> str:
    """The one-line command that re-runs a single case with the same choices
    (`extra_args`: further `run` options that shaped the case, e.g. its --distribution)."""
    words = ["python", "-m", "conformance", "run", "--case", case_id]
    if backend:
        words += ["--backend", backend]
    words += implementations.cli_args()
    words += list(extra_args)
    return shlex.join(words)
