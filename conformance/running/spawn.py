"""Starting a module of this harness in a new Python process (`python -m MODULE ARGS`).

A plain `python -m conformance.running.worker` imports whatever `conformance` comes
first on the child's sys.path, and the first entry is its working directory: the
user's, since a `--kernel` module is imported from there.  In a repository with a
`conformance` folder of its own, the child would run that repository's code.  So
the child starts with a bootstrap that imports the `conformance` package from
where this process has it, takes that folder off sys.path again, and runs the
module as `-m` would: the working directory stays importable for the user's
modules, and nothing is importable in the child that is not in the parent.
"""

from __future__ import annotations

import sys

from conformance.running.environment import HARNESS_ROOT

_BOOTSTRAP = ("import runpy, sys; sys.path.insert(0, {root!r}); import conformance; sys.path.remove({root!r}); "
              "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs `python -m module args` with this process's Python and harness."""
    return [sys.executable, "-c", _BOOTSTRAP.format(root=str(HARNESS_ROOT), module=module), *args]
