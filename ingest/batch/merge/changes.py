"""MERGE of changes with deletes: each key ends as its last change in sequence order.

A batch is first reduced to one row per key, its last change by (`_sequence`,
Kafka partition, offset); the MERGE then applies it only over an older target
row, so the result is that of applying every change in order, within a batch
and across batches.

soft deletes: a delete keeps the row with `_deleted = true`, its sequence and
position, so a late, older change to that key finds a newer row and changes
nothing.

hard deletes: the row goes. The delete's key, sequence and position are merged
into the delete log beside the target (`<target>_deletes`, the dead-letter
scheme: its own commit under the same txn id, before the target's). A change
not newer than the logged delete of its key is dropped before the target
MERGE. The log keeps every delete until `ingest maintain` purges the entries
older than its horizon (`purge_delete_log`); a change older than a purged
delete could then bring its row back, so the horizon must exceed the latest a
change can arrive.
"""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ingest.batch.formats.cdc import DELETE, OP, SEQUENCE
from ingest.batch.merge.condition import merge_condition
from ingest.batch.merge.target import MergeResult, create_table, target_rows
from ingest.batch.staged import RAW
from ingest.batch.uid import UID
from ingest.platform.delta import delta_table, table_exists
from ingest.spec.model import Pipeline, Target

DELETED = "_deleted"
DELETE_LOG_SUFFIX = "_deletes"
DELETE_LOG_COLUMNS = (UID, SEQUENCE, "_topic", "_partition", "_offset", "_kafka_timestamp",
                      "_ingested_at")
# what a delete sets on a soft-deleted row: the rest of the row keeps its last values
_DELETE_SET = (DELETED, SEQUENCE, OP, "_topic", "_partition", "_offset", "_kafka_timestamp",
               "_ingested_at")


def later(newer: str, older: str) -> str:
    """SQL: the change in `newer` comes after the one in `older` (sequence, partition, offset)."""
    return (f"struct({newer}._sequence, {newer}._partition, {newer}._offset) > "
            f"struct({older}._sequence, {older}._partition, {older}._offset)")


def last_changes(records: DataFrame) -> DataFrame:
    """Each key's last change by (`_sequence`, partition, offset): the order `later` uses."""
    last = Window.partitionBy(UID).orderBy(F.col(SEQUENCE).desc(), F.col(f"{RAW}.partition").desc(),
                                           F.col(f"{RAW}.offset").desc())
    return records.withColumn("__rank", F.row_number().over(last)).where(F.col("__rank") == 1).drop("__rank")


def change_rows(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Each key's last change in the batch, as target rows (soft: with `_deleted`)."""
    rows = target_rows(last_changes(records))
    if pipeline.target.deletes == "soft":
        rows = rows.withColumn(DELETED, F.col(OP) == DELETE)
    return rows


def merge_changes(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str]) -> MergeResult:
    """One MERGE commit into the target; with hard deletes, the delete log's own commit
    first. Both under the txn id the caller has set on the session."""
    condition = merge_condition(pipeline, bounds)
    if pipeline.target.deletes == "hard":
        rows = _after_logged_deletes(session, rows, pipeline, bounds)
        return _merge(delta_table(session, pipeline.target), rows, condition, hard=True)
    return _merge(delta_table(session, pipeline.target), rows, condition, hard=False)


def clauses(hard: bool) -> list[str]:
    """The MERGE's WHEN clauses as SQL, for `ingest plan`; `_merge` builds the same."""
    is_later, is_delete = later("s", "t"), f"s.{OP} = '{DELETE}'"
    if hard:
        return [f"WHEN MATCHED AND {is_delete} AND {is_later} THEN DELETE",
                f"WHEN MATCHED AND {is_later} THEN UPDATE SET *",
                f"WHEN NOT MATCHED AND s.{OP} <> '{DELETE}' THEN INSERT *"]
    return [f"WHEN MATCHED AND {is_delete} AND {is_later} THEN UPDATE SET "
            + ", ".join(f"{c} = s.{c}" for c in _DELETE_SET),
            f"WHEN MATCHED AND {is_later} THEN UPDATE SET *",
            "WHEN NOT MATCHED THEN INSERT *"]


def _merge(table, rows: DataFrame, condition: str, hard: bool) -> MergeResult:
    is_later, is_delete = later("s", "t"), f"s.{OP} = '{DELETE}'"
    builder = table.alias("t").merge(rows.alias("s"), condition).withSchemaEvolution()
    if hard:
        builder = (builder.whenMatchedDelete(condition=f"{is_delete} AND {is_later}")
                   .whenMatchedUpdateAll(condition=is_later)
                   .whenNotMatchedInsertAll(condition=f"s.{OP} <> '{DELETE}'"))
    else:
        builder = (builder.whenMatchedUpdate(condition=f"{is_delete} AND {is_later}",
                                             set={c: f"s.`{c}`" for c in _DELETE_SET})
                   .whenMatchedUpdateAll(condition=is_later)
                   .whenNotMatchedInsertAll())
    metrics = builder.execute().collect()
    row = metrics[0].asDict() if metrics else {}
    return MergeResult(inserted=int(row.get("num_inserted_rows") or 0),
                       updated=int(row.get("num_updated_rows") or 0),
                       deleted=int(row.get("num_deleted_rows") or 0), skipped=not metrics)


# --- the delete log (hard deletes) ------------------------------------------------


def delete_log(target: Target) -> Target:
    """Where hard deletes are remembered: beside the target, as the dead letters are."""
    if target.table:
        return Target(table=f"{target.table}{DELETE_LOG_SUFFIX}")
    return Target(path=f"{target.path.rstrip('/')}{DELETE_LOG_SUFFIX}")


def create_delete_log(session, pipeline: Pipeline, rows: DataFrame) -> None:
    log = delete_log(pipeline.target)
    if not table_exists(session, log):
        create_table(session, log, rows.select(*DELETE_LOG_COLUMNS))


def _after_logged_deletes(session, rows: DataFrame, pipeline: Pipeline,
                          bounds: dict[str, str]) -> DataFrame:
    """Log the batch's deletes, then drop each change that a logged delete supersedes."""
    log = delete_log(pipeline.target)
    deletes = rows.where(F.col(OP) == DELETE).select(*DELETE_LOG_COLUMNS)
    _log_deletes(session, log, deletes, pipeline, bounds)
    logged = delta_table(session, log).toDF()
    if "uid_min" in bounds:  # a literal bound lets Delta skip the log's files
        logged = logged.where(F.col(UID).between(bounds["uid_min"], bounds["uid_max"]))
    logged = logged.select(*[F.col(c).alias(f"__log{c}") for c in (UID, SEQUENCE, "_partition", "_offset")])
    joined = rows.join(logged, rows[UID] == logged[f"__log{UID}"], "left")
    # struct comparison needs the same field names on both sides
    newer = (F.struct(SEQUENCE, "_partition", "_offset")
             > F.struct(*[F.col(f"__log{c}").alias(c) for c in (SEQUENCE, "_partition", "_offset")]))
    keep = (F.col(OP) == DELETE) | F.col(f"__log{UID}").isNull() | newer
    return joined.where(keep).select(*rows.columns)


def _log_deletes(session, log: Target, deletes: DataFrame, pipeline: Pipeline,
                 bounds: dict[str, str]) -> None:
    # the log has no payload columns: only the uid bounds apply to it
    condition = merge_condition(replace(pipeline, target=replace(pipeline.target, dedup_horizon=None)),
                                bounds)
    (delta_table(session, log).alias("t").merge(deletes.alias("s"), condition)
     .whenMatchedUpdateAll(condition=later("s", "t"))
     .whenNotMatchedInsertAll().execute())


def purge_delete_log(session, pipeline: Pipeline, older_than_seconds: int) -> int:
    """What `ingest maintain` does with the log: forget the deletes logged longer ago
    than the horizon (by `_ingested_at`). Returns how many went."""
    log = delete_log(pipeline.target)
    if not table_exists(session, log):
        return 0
    name = log.table or "delta.`" + log.path.replace("`", "``") + "`"
    # SQL, not DeltaTable.delete: its result row says how many entries went
    done = session.sql(f"DELETE FROM {name} WHERE _ingested_at < "
                       f"current_timestamp() - INTERVAL {int(older_than_seconds)} SECONDS").collect()
    return int(done[0][0]) if done else 0
