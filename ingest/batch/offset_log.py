"""Spark's offset log in the checkpoint: the range each batch was planned to read.

Spark writes `offsets/<n>` before batch n runs, with the next offset of every
partition of the source, read or idle; `sources/0/0` holds where the query
started. The ledger records these, not the offsets of the records a batch
happened to hold, so it knows every partition and the ranges that held only
transaction markers. Local (or mounted) checkpoints are read as files; others
through Spark, so any file system the checkpoint is on works.
"""

from __future__ import annotations

import json
from pathlib import Path

Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset to read


def local_path(location: str) -> Path | None:
    """The local (or mounted) path of a location, or None for an object-store URI."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").removeprefix("//"))
    if "://" in location or location.startswith("dbfs:"):
        return None
    return Path(location)


def read_text(session, location: str) -> str | None:
    """A small file's text, or None when it does not exist."""
    local = local_path(location)
    if local is not None:
        return local.read_text(errors="replace") if local.is_file() else None
    from pyspark.errors import AnalysisException

    try:
        rows = session.read.option("wholetext", "true").text(location).collect()
    except AnalysisException:  # no such file
        return None
    return rows[0].value if rows else None


def parse_offsets_file(text: str) -> Offsets:
    """`v1`, the batch metadata, then one line per source: the Kafka source's JSON."""
    lines = [line for line in text.splitlines() if line.strip()]
    source = json.loads(lines[2]) if len(lines) > 2 else {}
    return _offsets(source)


def parse_initial_offsets(text: str | None) -> Offsets | None:
    """`sources/0/0`: a version line, then the Kafka source's JSON."""
    lines = [line for line in (text or "").splitlines() if line.strip().startswith("{")]
    return _offsets(json.loads(lines[-1])) if lines else None


def _offsets(source: dict) -> Offsets:
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in source.items()}


def planned_end(session, checkpoint: str, batch_id: int) -> Offsets | None:
    text = read_text(session, f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    return parse_offsets_file(text) if text else None


def planned_start(session, checkpoint: str, batch_id: int) -> Offsets | None:
    """The end of the batch before, or where the query started for batch 0."""
    root = checkpoint.rstrip("/")
    if batch_id == 0:
        return parse_initial_offsets(read_text(session, f"{root}/sources/0/0"))
    return planned_end(session, checkpoint, batch_id - 1)
