"""MERGE of changes with deletes: each key ends as its last change in sequence order.

A batch is first reduced to one row per key, its last change by (`_sequence`,
Kafka partition, offset); the MERGE then applies it only over an older target
row, so the result is that of applying every change in order, within a batch
and across batches.

soft deletes: a delete keeps the row with `_deleted = true`, its sequence and
position, so a late, older change to that key finds a newer row and changes
nothing.

hard deletes: the row goes. The delete's key, sequence and position are merged
into the delete log beside the target (`delete_log`); a change not newer than
the logged delete of its key is dropped before the target MERGE.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ingest.batch.merge import delete_log
from ingest.batch.merge.clauses import When, apply
from ingest.batch.merge.condition import merge_condition
from ingest.batch.merge.target import MergeResult, executed, target_rows
from ingest.batch.staged import KEEP, RAW, STAGE
from ingest.platform.delta import delta_table
from ingest.spec.columns import DELETE, OP, SEQUENCE, UID
from ingest.spec.model import Pipeline

DELETED = "_deleted"
# what a delete sets on a soft-deleted row: the rest of the row keeps its last values
_DELETE_SET = (DELETED, SEQUENCE, OP, "_topic", "_partition", "_offset", "_kafka_timestamp",
               "_ingested_at")


def later(newer: str, older: str) -> str:
    """SQL: the change in `newer` comes after the one in `older` (sequence, partition, offset)."""
    return (f"struct({newer}._sequence, {newer}._partition, {newer}._offset) > "
            f"struct({older}._sequence, {older}._partition, {older}._offset)")


def _rank() -> Column:
    """1 on each key's last change by (`_sequence`, partition, offset): the order `later` uses."""
    last = Window.partitionBy(UID).orderBy(F.col(SEQUENCE).desc(), F.col(f"{RAW}.partition").desc(),
                                           F.col(f"{RAW}.offset").desc())
    return F.row_number().over(last)


def last_changes(records: DataFrame) -> DataFrame:
    """Each key's last change by (`_sequence`, partition, offset): the order `later` uses."""
    return records.withColumn("__rank", _rank()).where(F.col("__rank") == 1).drop("__rank")


def mark_last(records: DataFrame) -> DataFrame:
    """KEEP on each key's last change among the good records: the row the MERGE takes, marked
    in the pass that fills the batch's cache, so the MERGE filters on it and does not rank again
    (one shuffle and sort of the batch, not two). Only a good record has a uid (`uid.with_uid`),
    so a key's window holds good records alone, as when `last_changes` ranks them after the
    filter; one row per key, the same keys, so the summary's unique count and bounds are too."""
    return records.withColumn(KEEP, F.col(STAGE).isNull() & (_rank() == 1))


def change_rows(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Each key's last change in the batch, as target rows (soft: with `_deleted`); where
    `mark_last` has marked the records, its KEEP says which."""
    last = records.where(F.col(KEEP)).drop(KEEP) if KEEP in records.columns else last_changes(records)
    rows = target_rows(last)
    if pipeline.target.deletes == "soft":
        rows = rows.withColumn(DELETED, F.col(OP) == DELETE)
    return rows


def merge_changes(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str],
                  logs_deletes: bool = True) -> MergeResult:
    """One MERGE commit into the target; with hard deletes, the delete log's own commit
    first (`logs_deletes`: none in a batch without deletes). Both under the txn id the
    caller has set on the session."""
    condition = merge_condition(pipeline, bounds)
    if pipeline.target.deletes == "hard":
        rows = delete_log.after_logged_deletes(session, rows, pipeline.target, bounds, SEQUENCE,
                                               ("_partition", "_offset"), logs_deletes)
        return _merge(delta_table(session, pipeline.target), rows, condition, hard=True)
    return _merge(delta_table(session, pipeline.target), rows, condition, hard=False)


def clauses(hard: bool) -> list[When]:
    """The MERGE's WHEN clauses, for the run and (as SQL) for `ingest plan`."""
    is_later, is_delete = later("s", "t"), f"s.{OP} = '{DELETE}'"
    if hard:
        return [When(True, "delete", f"{is_delete} AND {is_later}"),
                When(True, "update *", is_later),
                When(False, "insert *", f"s.{OP} <> '{DELETE}'")]
    return [When(True, "update", f"{is_delete} AND {is_later}", _DELETE_SET),
            When(True, "update *", is_later),
            When(False, "insert *")]


def _merge(table, rows: DataFrame, condition: str, hard: bool) -> MergeResult:
    builder = table.alias("t").merge(rows.alias("s"), condition).withSchemaEvolution()
    return executed(apply(builder, clauses(hard)))
