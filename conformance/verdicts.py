"""The verdict vocabulary shared by the runner, the plugin, the reports and the CLI.

See DESIGN.md "Verdicts". Kept in one place so that the order of report columns and
the set of verdicts that fail a run can never drift apart between modules.
"""

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
