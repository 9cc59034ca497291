"""`python -m conformance`: see conformance/cli.py."""

import sys

from conformance.cli import main

sys.exit(main())
