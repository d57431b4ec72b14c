"""What `make notebooks` commits of an executed notebook: outputs a reader on another machine
can trust and that do not change from one run to the next for no reason. The run's data root
(a temporary folder) reads as the project's `.ingest/data`, the project folder as nothing (paths
relative to it), and wall-clock times of the run as `(run time)`; the demo's own data times
(2026-11-02, 2026-11-03) stay as they are."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
SHOWN_ROOT = ".ingest/data"  # conf/local.yaml's DATA_ROOT, from the project folder
RUN_TIME = "(run time)"
# a time of day, not one a message gives as an example (`e.g. "2026-11-28T09:30:00Z"`)
_TIMESTAMP = re.compile(r'(?<!e\.g\. ")\b(\d{4}-\d\d-\d\d)[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?')
# a machine's own folders: nothing under them belongs in a committed output
MACHINE_PATHS = re.compile(r"(?<![\w.])/(?:tmp|home|root|Users|work|var/folders|private)/")


def clean_text(text: str, data_root: Path, since: date) -> str:
    text = text.replace(str(data_root), SHOWN_ROOT).replace(f"{PROJECT}/", "").replace(str(PROJECT), ".")
    return _TIMESTAMP.sub(lambda m: RUN_TIME if m.group(1) >= since.isoformat() else m.group(0), text)


def run_times(text: str, since: date) -> list[str]:
    """The times in `text` that are the run's own (on or after `since`)."""
    return [m.group(0) for m in _TIMESTAMP.finditer(text) if m.group(1) >= since.isoformat()]


def clean(notebook, data_root: Path, since: date) -> None:
    """In place: every output's text cleaned, and nbclient's per-cell execution times dropped."""
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            if "text" in output:
                output.text = clean_text(output.text, data_root, since)
            for mime in ("text/plain", "text/html"):
                if mime in output.get("data", {}):
                    output.data[mime] = clean_text(output.data[mime], data_root, since)


def output_text(notebook) -> str:
    """All of a notebook's outputs as text (streams, plain and HTML), one string."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.extend(output.get("data", {}).get(mime, "") for mime in ("text/plain", "text/html"))
    return "\n".join(parts)
