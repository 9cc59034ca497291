import sys

from conformance.bundled.mutants.cli import main

if __name__ == "__main__":
    sys.exit(main())
