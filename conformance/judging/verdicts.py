"""The verdict vocabulary shared by the runner, the plugin, the reports and the CLI.

See DESIGN.md "Verdicts". Kept in one place so that the order of report columns and
the set of verdicts that fail a run can never drift apart between modules.
"""

import traceback

PASS = "pass"
FAIL = "fail"
NONFINITE = "nonfinite"
ERROR = "error"
XPASS = "xpass"
XFAIL = "xfail"
UNSUPPORTED = "unsupported"

# Report column order: problems first, then the benign outcomes.
VERDICTS = (PASS, FAIL, NONFINITE, ERROR, XPASS, XFAIL, UNSUPPORTED)

# A run exits non-zero iff any case ends in one of these.
FAILING = frozenset({FAIL, NONFINITE, ERROR, XPASS})


def run_failed(verdicts) -> bool:
    """True iff any of `verdicts` fails a run (fail, nonfinite, error, xpass)."""
    return any(verdict in FAILING for verdict in verdicts)


# How much of an error an `error` verdict keeps: the first line of the message, the
# traceback's tail.
_TRACEBACK_LINES = 20
_REASON_CHARS = 400


def error_fields(exc: BaseException, prefix: str = "") -> dict:
    """`reason` (type and first message line) and `traceback` (its tail) of an exception."""
    message = str(exc).strip().splitlines()
    reason = f"{prefix}{type(exc).__name__}: {message[0] if message else ''}"
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    return {"reason": reason[:_REASON_CHARS], "traceback": "\n".join(lines[-_TRACEBACK_LINES:])}
