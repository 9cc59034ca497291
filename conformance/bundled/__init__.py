"""The code the harness ships, under names of its own: `conformance.bundled.kernels`,
`.reference`, `.mutants` and `.benchmarks`.

Why not top-level `kernels` and `reference`: those are common folder names (and
`kernels` a PyPI distribution), so an installed harness would shadow them, and a
harness run from another repository's root would import *that* repository's
`kernels` and judge it as the bundled one.  Every module of the harness therefore
imports the bundled code through this package, never by a top-level name.

Why the folders stay at the top of the repository: they are the product's layout
(the kernels stand alone, beside the harness, not inside it).  The two ways this
package finds them:

* installed (a wheel): setuptools' `package-dir` (pyproject.toml) copies each
  folder into this package's directory, an ordinary subpackage;
* a clone (or an editable install): this directory holds only this file, and the
  package's search path is extended to the repository root, where the folders
  are.  The root is only searched for names under this package, so nothing of
  the clone becomes importable at the top level by it.
"""

from pathlib import Path

BUNDLED = ("kernels", "reference", "mutants", "benchmarks")
_HERE = Path(__file__).resolve().parent
_CLONE_ROOT = _HERE.parent.parent

if not (_HERE / "kernels").is_dir():  # a clone: the folders sit at the repository root
    if not (_CLONE_ROOT / "kernels" / "__init__.py").is_file():
        raise ImportError(f"conformance.bundled: the bundled kernels are missing (neither {_HERE / 'kernels'} "
                          f"nor {_CLONE_ROOT / 'kernels'} exists): a broken installation")
    __path__.append(str(_CLONE_ROOT))  # noqa: F821 (a package's module global)
