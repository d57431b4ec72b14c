"""`python -m ingest ...`: the same entry point as the `ingest` script.

Also runs as a file, `spark-submit path/to/ingest/__main__.py run ...`: Python
then puts this folder first on sys.path, where `import ingest` fails (unless
installed) and modules here would shadow top-level ones; the folder above
takes its place.
"""

import sys
from pathlib import Path

if not __package__:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from ingest.cli import main  # noqa: E402  (after the sys.path fix above)

if __name__ == "__main__":
    sys.exit(main())
