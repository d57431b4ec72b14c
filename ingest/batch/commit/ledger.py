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

from ingest.errors import IngestError
from ingest.kafka.offsets import Offsets, OffsetsView, from_json, to_json
from ingest.platform.delta import at_location, latest_transactions

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

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


def batch_txn(pipeline: str, query_id: str, batch_id: int, end_offsets: OffsetsView,
              counts: Mapping[str, int] | None = None, origin: OffsetsView | None = None,
              table: str | None = None, start_offsets: OffsetsView | None = None,
              topic_ids: Mapping[str, str] | None = None) -> Txn:
    """`end_offsets` (and `start_offsets`) are the range Spark planned for the batch,
    every partition of it. `counts` (records read, per stage...) make each batch's
    figures readable from DESCRIBE HISTORY alone, e.g. duplicates removed = read -
    inserted - dead letters - filtered. `topic_ids` tell a topic from a later one of
    the same name.

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
        "end_offsets": to_json(end_offsets),
    }
    if origin:
        metadata["origin"] = to_json(origin)
    if start_offsets is not None:
        metadata["start_offsets"] = to_json(start_offsets)
    if topic_ids:
        metadata["topic_ids"] = dict(sorted(topic_ids.items()))
    if counts:
        metadata["counts"] = {name: int(value) for name, value in counts.items()}
    return Txn(ident, batch_id, json.dumps(metadata, separators=(",", ":")))


def entry_offsets(entry: dict, key: str = "end_offsets") -> Offsets | None:
    recorded = entry.get(key)
    return None if recorded is None else from_json(recorded)


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


# Operations after which the commits before them no longer describe the table's content.
_REPLACING = ("CREATE OR REPLACE TABLE", "REPLACE TABLE", "CREATE OR REPLACE TABLE AS SELECT",
              "REPLACE TABLE AS SELECT")


def history_entries(session, location: str, is_table: bool, pipeline: str, limit: int | None = None,
                    live_only: bool = True, topic_ids: Mapping[str, str] | None = None,
                    current_topics: bool = True):
    """(version, entry) of this pipeline's commits in a Delta table, newest first.

    `current_topics`: what an entry recorded for a topic under another topic id than the
    current one is left out of it (`of_current_topics`); the current id is the one in
    `topic_ids` (the broker's), else the newest entry's that names the topic.

    `live_only`: only the commits whose effect is still in the table's current
    version. A RESTORE to version v undoes the commits after v and before itself;
    a REPLACE TABLE undoes every commit before it. A user's DELETE or UPDATE
    undoes nothing here: the ledger says what the pipeline consumed, and `verify`
    reports the rows it finds missing."""
    table = at_location(session, location, is_table)
    history = table.history(limit) if limit else table.history()
    rows = history.select("version", "timestamp", "operation", "operationParameters",
                          "userMetadata").collect()
    entries = []
    for row in (live_commits(rows) if live_only else rows):
        entry = parse_metadata(row.userMetadata)
        if entry and entry.get("pipeline") == pipeline:
            entries.append((row.version, entry))
    if not current_topics:
        return entries
    return of_current_topics(entries, topic_ids or newest_topic_ids(entries))


def newest_topic_ids(entries) -> dict[str, str]:
    """topic -> the id the newest entry (of entries newest first) naming it recorded."""
    ids: dict[str, str] = {}
    for _, entry in entries:
        for topic, recorded in (entry.get("topic_ids") or {}).items():
            ids.setdefault(topic, recorded)
    return ids


_PER_TOPIC = ("end_offsets", "start_offsets", "origin", "topic_ids")  # an entry's keys that map topics


def of_current_topics(entries, topic_ids: Mapping[str, str]) -> list:
    """The entries without what they recorded for a topic under another topic id than its
    current one: a topic deleted and created again under the same name starts again at
    offset 0, and the old topic's offsets, origin and ranges say nothing about the new one.
    An entry without ids (written before they were recorded) is kept whole."""
    kept = []
    for version, entry in entries:
        stale = {t for t, recorded in (entry.get("topic_ids") or {}).items()
                 if t in topic_ids and topic_ids[t] != recorded}
        if stale:
            entry = {**entry, **{key: {t: v for t, v in entry[key].items() if t not in stale}
                                 for key in _PER_TOPIC if isinstance(entry.get(key), dict)}}
        kept.append((version, entry))
    return kept


def live_commits(rows) -> list:
    """The history rows (newest first) whose commits are still in effect."""
    live = []
    undone_after = None  # versions above it (and below the RESTORE seen) were undone
    for row in rows:
        if undone_after is not None and row.version > undone_after:
            continue
        if row.operation == "RESTORE":
            restored = _restored_version(row, rows)
            undone_after = restored if undone_after is None else min(undone_after, restored)
            continue
        if row.operation in _REPLACING:
            break
        live.append(row)
    return live


def _restored_version(restore, rows) -> int:
    """The version a RESTORE went back to (RESTORE ... TO TIMESTAMP AS OF names a time:
    the last version committed at or before it)."""
    parameters = restore.operationParameters or {}
    if parameters.get("version") not in (None, "", "null"):
        return int(parameters["version"])
    stamp = parameters.get("timestamp")
    older = [r.version for r in rows if r.version < restore.version and str(r.timestamp) <= str(stamp)]
    return max(older) if older else -1


def txn_version(session, location: str, is_table: bool, app: str, pipeline: str) -> int | None:
    """The version Delta has recorded for the app id (a write at or below it is skipped)."""
    table = at_location(session, location, is_table)
    try:
        found = latest_transactions(session, table._jdt.deltaLog()).get(app)
        return int(found.get()) if found.isDefined() else None
    except Exception:  # no JVM at hand (Spark Connect): the same from the history
        versions = [int(e.get("batch_id", -1)) for _, e in
                    history_entries(session, location, is_table, pipeline, live_only=False)
                    if e.get("app_id") == app]
        return max(versions) if versions else None


def recorded_offsets(entries) -> Offsets:
    """The furthest end offset per partition over the given ledger entries."""
    furthest: Offsets = {}
    for _, entry in entries:
        for topic, parts in entry.get("end_offsets", {}).items():
            for partition, offset in parts.items():
                known = furthest.setdefault(topic, {})
                known[int(partition)] = max(known.get(int(partition), 0), int(offset))
    return furthest


def recorded_origin(entries) -> Offsets | None:
    """The first start recorded in the ledger: the oldest entry's `origin`, per
    partition; a partition added later takes its origin from the first entry that
    names it. None when no entry records one (written before origins were)."""
    origin: Offsets = {}
    for _, entry in sorted(entries, key=lambda pair: pair[0]):
        for topic, parts in (entry.get("origin") or {}).items():
            for partition, offset in parts.items():
                origin.setdefault(topic, {}).setdefault(int(partition), int(offset))
    return origin or None


class ReplayMismatch(IngestError):
    """A batch id the table has already committed was planned with other offsets."""


def check_replay(session, location: str, is_table: bool, pipeline: str, txn: Txn,
                 start: OffsetsView | None, end: OffsetsView) -> None:
    """A batch whose id the table has already committed must be the same batch.

    Delta skips a write whose txn version is at or below the recorded one, whatever
    it holds. That is right for a batch replayed after a crash (same offsets), and a
    silent loss when the checkpoint's offset log was reset, or an older copy of it
    restored, while its `metadata` (the query id, hence the app id) was kept: Spark
    then numbers new ranges with ids the table has seen."""
    recorded = _recorded_entry(session, location, is_table, pipeline, txn)
    if recorded is None or "start_offsets" not in recorded or _same_range(recorded, start, end):
        return  # committed before the ledger recorded planned ranges: nothing exact to compare
    raise ReplayMismatch(
        f"{pipeline}: batch {txn.version} was already committed to {location} under app id {txn.app_id} "
        f"with offsets {_recorded_range(recorded)}, but this run planned {_describe(start, end)} for it. "
        f"The checkpoint's offsets/ and commits/ were reset, or an older copy of the checkpoint restored, "
        f"while its metadata (the query id) was kept; Delta would skip this batch and its records would "
        f"be lost. Delete the whole checkpoint folder: the next run resumes from the offsets recorded in "
        f"{location} with a new app id.")


def check_skipped(session, location: str, is_table: bool, pipeline: str, txn: Txn,
                  start: OffsetsView | None, end: OffsetsView) -> None:
    """Delta skipped this batch's MERGE: its txn version was committed while this run went on.

    Only another copy on the same checkpoint commits under this app id, and on an object
    store (no lease, no exclusive offset log) it may have planned another range for the
    batch id: skipped, this copy's records of the range would be lost once its checkpoint
    moves past them. The same range (a copy that replayed the very batch) is no loss."""
    recorded = _recorded_entry(session, location, is_table, pipeline, txn)
    if recorded is not None and (_same_range(recorded, start, end) if "start_offsets" in recorded
                                 else entry_offsets(recorded) == end):
        return
    found = f"with offsets {_recorded_range(recorded)}" if recorded else "(its ledger entry is gone)"
    raise ReplayMismatch(
        f"{pipeline}: batch {txn.version} was committed to {location} under app id {txn.app_id} by "
        f"another copy of the pipeline while this one ran, {found}; this copy planned "
        f"{_describe(start, end)} for it, and Delta skipped its MERGE. This copy stops before its "
        f"checkpoint moves past those offsets, so none of their records is lost. Two copies run on one "
        f"checkpoint: stop every copy, delete the whole checkpoint folder and start one copy; it "
        f"resumes from the offsets recorded in {location}.")


def _recorded_entry(session, location: str, is_table: bool, pipeline: str, txn: Txn) -> dict | None:
    return next((entry for _, entry in history_entries(session, location, is_table, pipeline,
                                                        live_only=False, current_topics=False)
                 if entry.get("app_id") == txn.app_id and entry.get("batch_id") == txn.version), None)


def _same_range(recorded: dict, start: OffsetsView | None, end: OffsetsView) -> bool:
    same_start = start is None or entry_offsets(recorded, "start_offsets") == start  # None: log purged
    return same_start and entry_offsets(recorded) == end


def _recorded_range(recorded: dict) -> str:
    return _describe(entry_offsets(recorded, "start_offsets"), entry_offsets(recorded) or {})


def _describe(start: OffsetsView | None, end: OffsetsView) -> str:
    return " ".join(f"{t}/{p}:{(start or {}).get(t, {}).get(p, '?')}-{o}"
                    for t, parts in sorted(end.items()) for p, o in sorted(parts.items())) or "nothing"
