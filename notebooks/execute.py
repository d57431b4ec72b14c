"""Re-run the notebooks in place on the demo's tables, so they are committed with fresh
outputs (they read on a code host as they are). `make notebooks` runs the demo first.

    python notebooks/execute.py [NOTEBOOK ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    paths = [Path(n).resolve() for n in names] or sorted(HERE.glob("*.ipynb"))
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        print(f"executing {path.name}", flush=True)
        NotebookClient(notebook, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(notebook, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
