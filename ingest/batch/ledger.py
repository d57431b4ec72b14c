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


def app_id(pipeline: str, query_id: str, table: str | None = None) -> str:
    """Stable for the life of a checkpoint; a new checkpoint has a new query id. With
    a table per topic, each table has its own (a dead-letter table the tables share
    then takes each table's commit of a batch)."""
    return f"ingest-{pipeline}-{query_id}" + (f"@{table}" if table else "")


def _offsets_document(offsets: Offsets) -> dict:
    return {t: {str(p): int(o) for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}


def batch_txn(pipeline: str, query_id: str, batch_id: int, end_offsets: Offsets,
              counts: Mapping[str, int] | None = None, origin: Offsets | None = None,
              table: str | None = None) -> Txn:
    """`counts` (records read, per stage...) make each batch's figures readable from
    DESCRIBE HISTORY alone, e.g. duplicates removed = read - inserted - dead letters - filtered.

    `origin` is where the pipeline first started reading, per partition (for
    `starting_offsets: latest`, the end of the topic at its first start). It is
    carried from the earlier entries across checkpoints (new app ids), so `verify`
    audits from the first start, not from a recovery point that could hide a loss."""
    ident = app_id(pipeline, query_id, table)
    metadata = {
        "ingest": 1,
        "pipeline": pipeline,
        "app_id": ident,
        "batch_id": batch_id,
        "end_offsets": _offsets_document(end_offsets),
    }
    if origin:
        metadata["origin"] = _offsets_document(origin)
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


def recorded_origin(entries) -> dict[str, dict[int, int]] | None:
    """The first start recorded in the ledger: the oldest entry's `origin`, per
    partition; a partition added later takes its origin from the first entry that
    names it. None when no entry records one (written before origins were)."""
    origin: dict[str, dict[int, int]] = {}
    for _, entry in sorted(entries, key=lambda pair: pair[0]):
        for topic, parts in (entry.get("origin") or {}).items():
            for partition, offset in parts.items():
                origin.setdefault(topic, {}).setdefault(int(partition), int(offset))
    return origin or None


def checkpoint_start_offsets(session, checkpoint: str) -> dict[str, dict[int, int]] | None:
    """Where the checkpoint's query first read: Spark's Kafka source writes its
    initial offsets in `sources/0/0` before the first batch."""
    from pyspark.errors import AnalysisException

    try:
        lines = session.read.text(f"{checkpoint.rstrip('/')}/sources/0/0").collect()
    except AnalysisException:  # no such file: the query has not planned a batch
        return None
    found = [line.value for line in lines if line.value.strip().startswith("{")]
    if not found:
        return None
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in json.loads(found[-1]).items()}
