"""One Triton cache directory per Triton version, shared by every run on the machine.

Triton compiles each kernel specialization once per process unless it finds the
binary in its cache directory. Every worker of a run, the next run and every job
of the nightly matrix (one Triton release each) therefore point TRITON_CACHE_DIR at

    $FA_TRITON_CACHE/triton-<version>       (FA_TRITON_CACHE set)
    $XDG_CACHE_HOME/fa-conformance/triton-<version>
    ~/.cache/fa-conformance/triton-<version>

so that a specialization compiled by one worker is loaded by the others, and a
second run compiles nothing. Triton's own cache key holds the kernel source, the
compiler options and the Triton version, so a stale entry cannot be used for a
changed kernel; one folder per version keeps the releases apart for clearing:
`rm -rf ~/.cache/fa-conformance` clears them all. A TRITON_CACHE_DIR the user set
is kept as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from conformance.running.environment import triton_version


def shared_cache_dir() -> Path:
    """The cache folder of the installed Triton version (see the module doc)."""
    root = os.environ.get("FA_TRITON_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(base) / "fa-conformance")
    return Path(root) / f"triton-{triton_version() or 'unknown'}"


def use_shared_cache() -> str:
    """Point TRITON_CACHE_DIR at the shared folder unless the user chose one; the folder used.
    Set in the environment, so pytest-xdist workers and isolated case processes inherit it."""
    chosen = os.environ.get("TRITON_CACHE_DIR")
    if chosen:
        return chosen
    folder = shared_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(folder)
    return str(folder)
