"""What the harness needs installed, checked before anything imports it.

The distribution declares torch and triton as dependencies, yet a vendor's torch or
triton build is often installed by other means, or deliberately left out of an
environment (`pip install --no-deps`).  A missing one would surface as an ImportError
traceback from deep inside the first module that imports it; this names it in one
line instead, from `fa-conformance`, `python -m conformance` and the pytest plugin.
The check only looks modules up (importlib.util.find_spec): it imports nothing.
"""

from __future__ import annotations

import importlib.util
import sys

# Every command imports these (the catalog and the command line are built on them).
ALWAYS = ("torch", "numpy", "tabulate", "packaging")
# The commands that launch kernels, and the pytest plugin, need these too; `report`,
# `diff` and `matrix` only read run folders.
BY_COMMAND = {"run": ("triton", "pytest"), "list": ("triton",), "probes": ("triton",),
              "compile": ("triton",), "flake": ("triton", "pytest")}
# import name -> what to install
DISTRIBUTIONS = {"torch": "torch", "numpy": "numpy", "tabulate": "tabulate", "packaging": "packaging",
                 "triton": "triton", "pytest": "pytest"}


def missing(command: str | None) -> list[str]:
    """The modules `command` needs that this Python cannot find, in a fixed order."""
    needed = (*ALWAYS, *BY_COMMAND.get(command or "", ()))
    return [name for name in needed if importlib.util.find_spec(name) is None]


def refusal(command: str | None) -> str | None:
    """One line naming what is missing for `command`, or None when nothing is."""
    absent = missing(command)
    if not absent:
        return None
    names = " and ".join(absent)
    install = " ".join(DISTRIBUTIONS[name] for name in absent)
    return (f"{names} {'is' if len(absent) == 1 else 'are'} not installed in this Python ({sys.executable}), "
            f"and the harness needs {'it' if len(absent) == 1 else 'them'}: install with "
            f"`{sys.executable} -m pip install {install}` (or your platform's own build)")
