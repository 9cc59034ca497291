"""The import structure: no circles anywhere, and the kernels stand alone.

Built from the source with `ast` (nothing is imported): every `import X` and
`from X import Y` of the repository's own packages, `from P import m` counting as
an import of the submodule P.m where m is one. Modules are named as they are
imported: the top-level folders kernels/, reference/, mutants/ and benchmarks/ as
`conformance.bundled.<folder>` (conformance/bundled/__init__.py). A circle means two
modules can only be understood (and imported) together; the kernels importing the
harness would make the thing under test depend on its tester.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ("kernels", "reference", "mutants", "benchmarks")  # imported as conformance.bundled.<name>
PACKAGES = ("conformance", *BUNDLED)
KERNELS, REFERENCE = "conformance.bundled.kernels", "conformance.bundled.reference"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(("conformance", "bundled", *parts) if parts[0] in BUNDLED else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imports(path: Path, name: str, known: dict) -> set[str]:
    """The repository modules `path` imports, at any depth of its code (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, name, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_there_are_no_import_circles():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_kernels_import_nothing_of_the_harness():
    graph = import_graph()
    harness = [(module, imported) for module, imports in graph.items() if _within(module, KERNELS)
               for imported in imports if not (_within(imported, KERNELS) or _within(imported, REFERENCE))]
    assert harness == []
    assert graph[f"{KERNELS}.piecewise"] >= {f"{REFERENCE}.validation"}  # relative imports are resolved


def _absolute_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module, node.lineno


def test_nothing_imports_the_bundled_folders_by_their_top_level_names():
    """`import kernels` would import whatever `kernels` comes first on sys.path: another
    repository's, or the `kernels` distribution on PyPI (conformance/bundled says more)."""
    files = [*(path for package in (*PACKAGES, "tests") for path in (ROOT / package).rglob("*.py")),
             ROOT / "conftest.py"]
    found = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files for name, line in _absolute_imports(path)
             if name.split(".")[0] in BUNDLED]
    assert found == []


@pytest.mark.parametrize("package", ["conformance"])
def test_at_most_16_modules_at_the_top_of_the_package(package):
    top = [path for path in (ROOT / package).glob("*.py")]
    assert len(top) <= 16, sorted(path.name for path in top)
