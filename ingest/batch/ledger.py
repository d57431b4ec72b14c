"""The idempotent transaction id and the Kafka offsets each commit carries.

Every target commit is made under `txnAppId` = the pipeline and its checkpoint's
query id, `txnVersion` = the batch id, and carries the batch's end offsets in
its commit metadata. Delta skips a commit whose version is not above the one
recorded for the app id, so a replayed batch is a no-op; the offsets let a run
whose checkpoint is lost resume where the table says it stopped.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

Offsets = Mapping[str, Mapping[int, int]]  # topic -> partition -> next offset to read


@dataclass(frozen=True)
class Txn:
    app_id: str
    version: int
    metadata: str


def app_id(pipeline: str, query_id: str) -> str:
    """Stable for the life of a checkpoint; a new checkpoint has a new query id."""
    return f"ingest-{pipeline}-{query_id}"


def batch_txn(pipeline: str, query_id: str, batch_id: int, end_offsets: Offsets,
              counts: Mapping[str, int] | None = None) -> Txn:
    """`counts` (records read, per stage...) make each batch's figures readable from
    DESCRIBE HISTORY alone, e.g. duplicates removed = read - inserted - dead letters - filtered."""
    ident = app_id(pipeline, query_id)
    metadata = {
        "ingest": 1,
        "pipeline": pipeline,
        "app_id": ident,
        "batch_id": batch_id,
        "end_offsets": {t: {str(p): o for p, o in sorted(parts.items())}
                        for t, parts in sorted(end_offsets.items())},
    }
    if counts:
        metadata["counts"] = {name: int(value) for name, value in counts.items()}
    return Txn(ident, batch_id, json.dumps(metadata, separators=(",", ":")))


@contextmanager
def txn_settings(session, txn: Txn) -> Iterator[None]:
    """Set on the batch's own session (Spark clones one per query), cleared after,
    so nothing leaks into a later write of that query."""
    session.conf.set(TXN_APP_ID, txn.app_id)
    session.conf.set(TXN_VERSION, str(txn.version))
    session.conf.set(USER_METADATA, txn.metadata)
    try:
        yield
    finally:
        for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA):
            session.conf.unset(key)


def parse_metadata(text: str | None) -> dict | None:
    """The ledger entry of a commit, or None for a commit that is not ours."""
    if not text:
        return None
    try:
        entry = json.loads(text)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and entry.get("ingest") == 1 else None


def checkpoint_query_id(session, checkpoint: str) -> str | None:
    """The query id Spark wrote in the checkpoint's `metadata` file, if there is one.

    Read through Spark so it works on any file system the checkpoint is on."""
    from pyspark.errors import AnalysisException

    try:
        lines = session.read.text(f"{checkpoint.rstrip('/')}/metadata").collect()
    except AnalysisException:  # no such file: a new checkpoint
        return None
    for line in lines:
        try:
            return json.loads(line.value)["id"]
        except (ValueError, KeyError, TypeError):
            continue
    return None


def history_entries(session, location: str, is_table: bool, pipeline: str, limit: int | None = None):
    """(version, entry) of this pipeline's commits in a Delta table, newest first."""
    from delta.tables import DeltaTable

    table = DeltaTable.forName(session, location) if is_table else DeltaTable.forPath(session, location)
    history = table.history(limit) if limit else table.history()
    rows = history.select("version", "userMetadata").collect()
    entries = []
    for row in rows:
        entry = parse_metadata(row.userMetadata)
        if entry and entry.get("pipeline") == pipeline:
            entries.append((row.version, entry))
    return entries


def recorded_offsets(entries) -> dict[str, dict[int, int]]:
    """The furthest end offset per partition over the given ledger entries."""
    furthest: dict[str, dict[int, int]] = {}
    for _, entry in entries:
        for topic, parts in entry.get("end_offsets", {}).items():
            for partition, offset in parts.items():
                known = furthest.setdefault(topic, {})
                known[int(partition)] = max(known.get(int(partition), 0), int(offset))
    return furthest
