"""Files that several tests read, made once per test session, also under pytest-xdist.

A module- or session-scoped fixture runs once in every pytest-xdist worker that runs one of
its tests, and which tests share a worker is up to the scheduler: an expensive fixture (a
wheel, a run of many cases) can run once per worker. `made_once_per_session` makes it once:
the first worker to ask makes the folder, the others wait for it and read the same files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:  # not POSIX: every pytest-xdist worker makes its own
    fcntl = None


def made_once_per_session(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name` that `make(folder)` fills once per test session (per worker where
    there is no file locking). What `make` writes must only ever be read: a test that changes
    files works in a copy of its own. When `make` raises, nothing is kept, and the next
    worker to ask makes it again (and fails the same way)."""
    root = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and root.name == f"popen-{worker}" and fcntl is not None:
        root = root.parent  # the session's folder (pytest-of-<user>/pytest-<N>), its workers' parent
    folder, done = root / f"once-{name}", root / f"once-{name}.done"
    with open(root / f"once-{name}.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
