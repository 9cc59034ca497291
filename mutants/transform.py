"""Mutants as small, named source edits of the real kernels package (`conformance.bundled.kernels`).

A mutant is a list of `Edit`s: in one file of `kernels/`, one exact snippet is
replaced.  The snippet must occur exactly once in the file (at the moment its
edit is applied), otherwise `PatternError` names the mutant, the file and the
count: a refactor of the kernels can then never silently turn a mutant back
into the original (or into a different fault).

`load(mutant)` materialises the mutated package on disk -- Triton's `@jit`
reads its functions' source with `inspect.getsource`, which needs real files --
under its own top-level package name (`_fa_mutant_<name>`) and imports it.  The
kernels import each other relatively, so the copy finds its own modules as it
is; its imports of the bundled reference (`from ..reference...`, which would
leave a top-level package) are pointed at `conformance.bundled.reference`, the
real one, which no mutant edits.  The directory is keyed by a digest of the kernel
sources and the edits, written atomically, and reused by every process
(pytest-xdist workers, the kill runner's pool).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

KERNELS_PACKAGE = "conformance.bundled.kernels"
BUNDLED_PACKAGE = KERNELS_PACKAGE.rpartition(".")[0]  # the kernels' parent: where `..reference` is
# Found without importing it: the bundled kernels must not be defined before the
# backend is activated (the interpreter needs TRITON_INTERPRET=1 first).
KERNELS_DIR = Path(importlib.util.find_spec(KERNELS_PACKAGE).origin).parent
PACKAGE_PREFIX = "_fa_mutant_"
# An absolute `from conformance.bundled.kernels.x import ...` / `import ...` at the start of a line
# (the kernels have none; renamed should one appear, so a mutant never runs the original's modules).
_KERNEL_IMPORT = re.compile(rf"^(\s*(?:from|import)\s+){re.escape(KERNELS_PACKAGE)}(?=[.\s])", re.MULTILINE)
# `from ..x import ...` / `from .. import x`: an import that leaves the kernels package.
_PARENT_IMPORT = re.compile(r"^(\s*from\s+)\.\.(\w|\s)", re.MULTILINE)


class PatternError(ValueError):
    """An edit's snippet does not occur exactly once in its file."""


@dataclass(frozen=True)
class Edit:
    """Replace the one occurrence of `find` in kernels/`file` by `replace`."""

    file: str
    find: str
    replace: str


@dataclass(frozen=True)
class Mutant:
    """A deliberately broken variant of the bundled kernels.

    fault: the fault class, one line (shown in the kill table).
    counted: False for the robustness fixtures (`crash`, `hang`), which are not
        sensitivity mutants and are never run by the kill table.
    interpreter_unreachable: why the fault cannot show on Triton's CPU
        interpreter, if it cannot (e.g. a race: the interpreter runs programs
        one after another); None when the smoke tier must kill it.
    backends: the backend families (conformance.backends' profile names: "cuda",
        "hip", ...) whose compilers build the edit at all, e.g. one vendor's inline
        assembly; None: every backend.  Elsewhere the kill table says it is
        unreachable there instead of hunting it (its cases would only error).
    """

    name: str
    fault: str
    edits: tuple[Edit, ...]
    counted: bool = True
    interpreter_unreachable: str | None = None
    backends: tuple[str, ...] | None = None

    @property
    def package(self) -> str:
        return PACKAGE_PREFIX + self.name

    @property
    def files(self) -> tuple[str, ...]:
        """The kernel files this mutant edits, in edit order, without repeats."""
        return tuple(dict.fromkeys(edit.file for edit in self.edits))


def apply_edit(source: str, edit: Edit, mutant_name: str) -> str:
    """`source` with the single occurrence of `edit.find` replaced; PatternError otherwise."""
    count = source.count(edit.find)
    if count != 1:
        where = "does not occur" if count == 0 else f"occurs {count} times"
        raise PatternError(f"mutant {mutant_name!r}: in kernels/{edit.file} the snippet {where} "
                           f"(it must occur exactly once): {edit.find!r}")
    return source.replace(edit.find, edit.replace)


def rename_imports(source: str, package: str) -> str:
    """One kernel file's imports as its copy in the top-level package `package` needs them:
    those leaving the kernels package made absolute (the real bundled code), any absolute
    import of the kernels package pointed at `package`; relative ones within it kept."""
    source = _KERNEL_IMPORT.sub(lambda match: match.group(1) + package, source)
    return _PARENT_IMPORT.sub(lambda match: match.group(1) + BUNDLED_PACKAGE
                              + ("." if not match.group(2).isspace() else "") + match.group(2), source)


def kernel_sources(kernels_dir: Path = KERNELS_DIR) -> dict[str, str]:
    """file name -> text of every module of the bundled kernels package."""
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(kernels_dir.glob("*.py"))}


def mutated_sources(mutant: Mutant, sources: dict[str, str] | None = None) -> dict[str, str]:
    """The mutant's package sources: the edits applied, imports renamed to its package."""
    sources = dict(kernel_sources() if sources is None else sources)
    for edit in mutant.edits:
        if edit.file not in sources:
            raise PatternError(f"mutant {mutant.name!r}: no file kernels/{edit.file}")
        sources[edit.file] = apply_edit(sources[edit.file], edit, mutant.name)
    return {name: rename_imports(text, mutant.package) for name, text in sources.items()}


def _cache_root() -> Path:
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"fa-mutants-{user}"


def materialise(mutant: Mutant) -> Path:
    """Write the mutant's package to disk (once per content) and return the directory
    to put on sys.path; PatternError if an edit does not apply."""
    sources = mutated_sources(mutant)
    digest = hashlib.sha256(repr(sorted(sources.items())).encode()).hexdigest()[:16]
    root = _cache_root() / f"{mutant.name}-{digest}"
    if not (root / mutant.package / "__init__.py").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{mutant.name}-", dir=root.parent))
        package_dir = staging / mutant.package
        package_dir.mkdir()
        for name, text in sources.items():
            (package_dir / name).write_text(text, encoding="utf-8")
        try:
            os.rename(staging, root)  # atomic: a concurrent writer of the same content may win
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not (root / mutant.package / "__init__.py").exists():
                raise
    return root


def load(mutant: Mutant):
    """Import the mutant's package (call after conformance.backends.activate())."""
    if mutant.package in sys.modules:
        return sys.modules[mutant.package]
    root = str(materialise(mutant))
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(mutant.package)
