"""`python -m conformance` and the `fa-conformance` command: see conformance/cli.py.

This is the one entry that must run before the harness is imported: a Python without
torch or triton (or the rest, conformance.dependencies) gets one line naming what is
missing and exit code 2, not an ImportError traceback from the first module needing it.
"""

import sys

from conformance import dependencies

EXIT_USAGE = 2  # conformance.usage's, not imported from there: it imports torch


def _command(argv: list[str]) -> str | None:
    """The subcommand word of `argv` (the first argument that is not an option)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    refusal = dependencies.refusal(_command(argv))
    if refusal:
        print(f"conformance: error: {refusal}", file=sys.stderr)
        return EXIT_USAGE
    from conformance.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
