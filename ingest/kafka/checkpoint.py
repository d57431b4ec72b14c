"""What Spark's checkpoint of the Kafka source says, read in this one module.

Spark writes `sources/0/0` (where the query started) before its first batch,
`offsets/<n>` (the range batch n is planned to read, every partition of the
source, read or idle) before batch n runs and `commits/<n>` after it; the last n
with both is where the query resumes. `metadata` holds the query id. The ledger
records these planned ranges, not the offsets of the records a batch happened to
hold, so it knows every partition and the ranges that held only transaction
markers. Files are read through `platform.files`, so any file system works.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from ingest.kafka.offsets import Offsets, from_json
from ingest.platform.files import numbered_files, read_text


@dataclass
class _BatchFiles:
    """A checkpoint's files as a running batch read them (`read_once`)."""

    texts: dict[str, str | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the tables asking wait for one read


_read_in_batch: dict[str, _BatchFiles] = {}  # checkpoint -> its files, while a batch reads them once
_registering = threading.Lock()


@dataclass(frozen=True)
class CheckpointState:
    last_committed_batch: int | None
    committed_offsets: Offsets | None
    planned_batch: int | None  # the highest offsets/<n>, committed or not

    @property
    def empty(self) -> bool:
        return self.planned_batch is None


def read_state(spark, checkpoint: str) -> CheckpointState:
    root = checkpoint.rstrip("/")
    offsets = numbered_files(spark, f"{root}/offsets")
    commits = numbered_files(spark, f"{root}/commits")
    committed = [n for n in offsets if n in commits]
    if not committed:
        return CheckpointState(None, None, max(offsets) if offsets else None)
    last = max(committed)
    return CheckpointState(last, parse_offsets_file(offsets[last]), max(offsets))


def parse_offsets_file(text: str) -> Offsets:
    """`v1`, the batch metadata, then one line per source: the Kafka source's JSON."""
    lines = [line for line in text.splitlines() if line.strip()]
    return from_json(json.loads(lines[2]) if len(lines) > 2 else {})


def parse_initial_offsets(text: str | None) -> Offsets | None:
    """`sources/0/0`: a version line, then the Kafka source's JSON."""
    lines = [line for line in (text or "").splitlines() if line.strip().startswith("{")]
    return from_json(json.loads(lines[-1])) if lines else None


@contextmanager
def read_once(checkpoint: str) -> Iterator[None]:
    """Within it, the planned ranges of `checkpoint`'s batches are read from its files once, for
    however many tables ask (`batch.routing`: each table's position asks for its batch's). On an
    object store each read is a Spark job. Only while the batch runs: Spark wrote its offset log
    entry (and the one before) before it called the batch function and changes neither while it
    runs; after it, a checkpoint made again at the same path is read afresh."""
    root = checkpoint.rstrip("/")
    with _registering:
        _read_in_batch[root] = _BatchFiles()
    try:
        yield
    finally:
        with _registering:
            _read_in_batch.pop(root, None)


def _text(session, checkpoint: str, name: str) -> str | None:
    root = checkpoint.rstrip("/")
    location = root + name
    with _registering:
        files = _read_in_batch.get(root)
    if files is None:
        return read_text(session, location)
    with files.lock:
        if location not in files.texts:
            files.texts[location] = read_text(session, location)
        return files.texts[location]


def initial_offsets(session, checkpoint: str) -> Offsets | None:
    """Where the checkpoint's query started, or None before its first batch was planned."""
    return parse_initial_offsets(_text(session, checkpoint, "/sources/0/0"))


def planned_end(session, checkpoint: str, batch_id: int) -> Offsets | None:
    text = _text(session, checkpoint, f"/offsets/{batch_id}")
    return parse_offsets_file(text) if text else None


def planned_start(session, checkpoint: str, batch_id: int) -> Offsets | None:
    """The end of the batch before, or where the query started for batch 0."""
    if batch_id == 0:
        return initial_offsets(session, checkpoint)
    return planned_end(session, checkpoint, batch_id - 1)


def query_id(session, checkpoint: str) -> str | None:
    """The query id Spark wrote in the checkpoint's `metadata` file, if there is one."""
    text = read_text(session, f"{checkpoint.rstrip('/')}/metadata")
    for line in (text or "").splitlines():
        try:
            return json.loads(line)["id"]
        except (ValueError, KeyError, TypeError):
            continue
    return None
