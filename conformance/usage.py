"""What every command shares: exit codes, the usage error, and the --backend option.

A command raises UsageError for a bad argument; `python -m conformance` prints it as
one line naming the argument and exits EXIT_USAGE.
"""

from __future__ import annotations

from conformance import backends

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument: reported as one line, exit code 2."""


def backend_profile(backend: str | None, activate: bool) -> backends.BackendProfile:
    """The profile --backend names (detected when None), made active if asked -- which a
    profile of a device this machine lacks cannot be (listing its cases needs no device)."""
    try:
        profile = backends.profile_by_key(backend) if backend else backends.detect()
        absent = backends.absence(profile) if activate else None
    except ValueError as exc:
        raise UsageError(f"argument --backend: {str(exc).removeprefix('--backend: ')}") from None
    if absent:
        raise UsageError(f"argument --backend: {absent}")
    return backends.activate(profile) if activate else profile
