"""`python -m ingest ...`: the same entry point as the `ingest` script."""

import sys

from ingest.cli import main

if __name__ == "__main__":
    sys.exit(main())
