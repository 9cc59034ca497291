"""Which implementation of each operator a run judges, and what it declares.

By default an operator `op` is `conformance.bundled.kernels.<op>` (the bundled Triton
kernels, named `kernels:<op>` in results, reports and the known-issue registry). A
`--kernel op=package.module:function` spec replaces it with any callable of the
same signature, importable from the current directory:

    flash_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False)

or with a built-in adapter of a peer: `--kernel flash_attention=sdpa:BACKEND` (torch's
scaled_dot_product_attention forced to one backend: conformance.peers.sdpa) or
`--kernel flash_attention=flex` (torch's FlexAttention, compiled: conformance.peers.flex).

With the implementation come its declared capabilities (conformance.running.capabilities:
the function's `capabilities` attribute, or a table of `--capabilities FILE`) and,
for kernels that own their dropout RNG, the function that recomputes their mask
(`--dropout-mask [op=]MODULE:FUNCTION`, conformance.judging.dropout).

Only bundled kernels and their mutants (copies of them with one edit, which allocate
through their own copy of kernels.allocation) are run under `poisoned_outputs()`
(NaN-filled outputs, so unwritten elements show up as `nonfinite`): the harness cannot
reach into another implementation's allocations.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shlex
import sys
from dataclasses import dataclass, field

from conformance.cases.catalog import OPS
from conformance.running import capabilities as declared_capabilities

BUNDLED_PACKAGE = "conformance.bundled.kernels"  # where the bundled operators are imported from
BUNDLED_LABEL = "kernels"  # their name in results lines, env.json and known issues (`kernels:<op>`)
BUNDLED_MODULE = BUNDLED_LABEL  # the label's former name, still read by conformance.reporting.summary
MUTANTS_REGISTRY = "conformance.bundled.mutants.registry"  # the mutants' --kernel targets
# Built-in adapters of peers: `--kernel op=NAME:VARIANT` (or `op=NAME`, no variant) -> the module
# providing adapter(op, VARIANT) (VARIANT "" for none).
BUILTIN_ADAPTERS = {"sdpa": "conformance.peers.sdpa", "flex": "conformance.peers.flex_adapter"}
_SPEC = re.compile(r"(?P<op>\w+)=(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)")
_BUILTIN_SPEC = re.compile(r"(?P<op>\w+)=(?P<name>" + "|".join(BUILTIN_ADAPTERS) + ")")
_MASK_SPEC = re.compile(r"(?:(?P<op>\w+)=)?(?P<module>[A-Za-z_][\w.]*):(?P<function>[A-Za-z_]\w*)")
DROPOUT_OP = "flash_attention"  # the only operator with dropout


def _import_target(target: str, what: str):
    """The attribute `function` of `module` for "module:function"; ImportError naming both."""
    module_name, _, function_name = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # "importable from the current directory"
    module = importlib.import_module(module_name)
    try:
        found = getattr(module, function_name)
    except AttributeError:
        raise ImportError(f"module {module_name!r} has no attribute {function_name!r}") from None
    if not callable(found):
        raise TypeError(f"{what} {target} is a {type(found).__name__}, not a callable")
    return found


@dataclass(frozen=True)
class Implementations:
    """op -> "module:function", with the user's `--kernel` overrides, `--capabilities`
    file and `--dropout-mask` functions remembered so reproduce commands repeat them."""

    overrides: dict = field(default_factory=dict)
    capabilities_file: str | None = None
    dropout_masks: dict = field(default_factory=dict)  # op -> "module:function"
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_specs(cls, specs, capabilities_file: str | None = None, dropout_masks=()) -> "Implementations":
        """Parse `op=package.module:function` (or built-in `op=sdpa:BACKEND`, `op=flex`) specs;
        ValueError naming the option if bad."""
        overrides = {}
        for spec in specs or ():
            op, target = _kernel_spec(spec)
            _check_op(op, "--kernel")
            if op in overrides:
                raise ValueError(f"argument --kernel: {op} given twice")
            overrides[op] = target
        masks = {}
        for spec in dropout_masks or ():
            match = _MASK_SPEC.fullmatch(spec.strip())
            if not match:
                raise ValueError(f"argument --dropout-mask: expected [op=]package.module:function, got {spec!r}")
            op = match["op"] or DROPOUT_OP
            _check_op(op, "--dropout-mask")
            if op != DROPOUT_OP:
                raise ValueError(f"argument --dropout-mask: {op} has no dropout (only {DROPOUT_OP})")
            masks[op] = f"{match['module']}:{match['function']}"
        return cls(overrides, capabilities_file, masks)

    @classmethod
    def from_selection(cls, selection: dict) -> "Implementations":
        """The implementations a run's selection (conformance.running.selection) names."""
        return cls.from_specs(selection.get("kernels"), selection.get("capabilities"),
                              selection.get("dropout_masks"))

    def name(self, op: str) -> str:
        """What runs for `op`, e.g. `kernels:flash_attention`, `mypkg.attn:fa`, `sdpa:cudnn` or `flex`."""
        return self.overrides.get(op, f"{BUNDLED_LABEL}:{op}")

    def is_bundled(self, op: str) -> bool:
        return op not in self.overrides

    def uses_bundled_tables(self, op: str) -> bool:
        """Whether `op` launches with the bundled kernels' launch tables (kernels.tuning):
        the bundled kernels and the mutants, which are those kernels with one edit."""
        return self.is_bundled(op) or self.is_mutant(op)

    def is_mutant(self, op: str) -> bool:
        """Whether `op` runs a mutant: the bundled kernels with one edit, in a package of its own."""
        return self.name(op).startswith(f"{MUTANTS_REGISTRY}:")

    def is_builtin_adapter(self, op: str) -> bool:
        """Whether `op` runs a built-in peer adapter (`sdpa:...`, `flex`), which may refuse a case."""
        return not self.is_bundled(op) and self.name(op).partition(":")[0] in BUILTIN_ADAPTERS

    def resolve(self, op: str):
        """Import and return the callable for `op` (call after backends.activate())."""
        if ("resolve", op) not in self._cache:
            self._cache[("resolve", op)] = self._resolve(op)
        return self._cache[("resolve", op)]

    def _resolve(self, op: str):
        module_name, _, variant = self.name(op).partition(":")
        if self.is_bundled(op):
            return getattr(importlib.import_module(BUNDLED_PACKAGE), op)
        if module_name in BUILTIN_ADAPTERS:
            return importlib.import_module(BUILTIN_ADAPTERS[module_name]).adapter(op, variant)
        return _import_target(self.name(op), "--kernel")

    def capabilities(self, op: str):
        """(declaration or None, where it came from) for `op`; ValueError if malformed."""
        if ("capabilities", op) not in self._cache:
            self._cache[("capabilities", op)] = self._capabilities(op)
        return self._cache[("capabilities", op)]

    def _capabilities(self, op: str):
        if self.capabilities_file:
            tables = declared_capabilities.load_file(self.capabilities_file)
            if op in tables:
                return tables[op], f"{self.capabilities_file} [{op}]"
        if self.is_bundled(op):
            return None, None  # the backend profile says what the bundled kernels support
        declared = declared_capabilities.of_function(self.resolve(op), self.name(op))
        if declared is None:
            return None, None
        where = "built-in adapter" if self.is_builtin_adapter(op) else "attribute"
        return declared, f"{where} {self.name(op)}.capabilities"

    def dropout_mask(self, op: str):
        """The seed/offset protocol's mask function for `op`, or None (conformance.judging.dropout)."""
        if op not in self.dropout_masks:
            return None
        if ("mask", op) not in self._cache:
            self._cache[("mask", op)] = _import_target(self.dropout_masks[op], "--dropout-mask")
        return self._cache[("mask", op)]

    def check(self) -> None:
        """Import every chosen function and read every declaration now, so that a bad
        --kernel, --dropout-mask or --capabilities is one usage error before any case runs."""
        for op in OPS:
            self.capabilities(op)
        for op in self.overrides:
            self.resolve(op)
        for op in self.dropout_masks:
            self.dropout_mask(op)

    def launch_context(self, op: str):
        """Context manager to launch `op` in: NaN-poisoned outputs for the bundled kernels
        and their mutants (each mutant's package has its own allocation module)."""
        if self.is_bundled(op):
            return importlib.import_module(BUNDLED_PACKAGE).poisoned_outputs()
        if self.is_mutant(op):
            package = self.resolve(op).__module__.rpartition(".")[0]
            return importlib.import_module(package).poisoned_outputs()
        return contextlib.nullcontext()

    def cli_args(self) -> list[str]:
        """The options that select these implementations again."""
        words = [arg for op, target in self.overrides.items() for arg in ("--kernel", f"{op}={target}")]
        if self.capabilities_file:
            words += ["--capabilities", self.capabilities_file]
        return words + [arg for op, target in self.dropout_masks.items() for arg in ("--dropout-mask", f"{op}={target}")]

    def describe(self) -> dict:
        """op -> implementation name, for every known op (for env.json)."""
        return {op: self.name(op) for op in OPS}

    def declarations(self) -> dict:
        """op -> {source, declared keys} for every op that declares capabilities (for env.json)."""
        described = {}
        for op in OPS:
            declaration, source = self.capabilities(op)
            if declaration is not None:
                described[op] = {"source": source, "declared": declaration.declared()}
        return described


def _kernel_spec(spec: str) -> tuple[str, str]:
    """(op, target) of a --kernel spec: `op=package.module:function`, or a built-in adapter
    without a variant (`op=flex`); ValueError naming the option if neither."""
    match = _SPEC.fullmatch(spec.strip())
    if match:
        return match["op"], f"{match['module']}:{match['function']}"
    match = _BUILTIN_SPEC.fullmatch(spec.strip())
    if match:
        return match["op"], match["name"]
    raise ValueError(f"argument --kernel: expected op=package.module:function (or a built-in: op=sdpa:BACKEND, "
                     f"op=flex), got {spec!r}")


def _check_op(op: str, option: str) -> None:
    if op not in OPS:
        raise ValueError(f"argument {option}: unknown op {op!r} (known: {', '.join(OPS)})")


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
