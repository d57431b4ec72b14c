"""SCD type 2: every version of a row, with `_valid_from`, `_valid_to` and `_current`.

A version is one change of a key: `_valid_from` is its sequence, `_valid_to`
the sequence of the key's next change (null for the last), `_current` is true
on the last version unless that is a delete. A delete is kept as a version
(`_op = 'd'`, `_deleted = true`, never current): it ends the version before it,
and a late, older change is then slotted in before it, never made current.

Each batch: the batch's changes (one per key and sequence; an equal sequence
goes to the later Kafka position) are put together with the versions the target
already holds for the batch's keys, the intervals of those keys are computed
again, and one MERGE on (`_uid`, `_valid_from`) inserts the new versions and
updates the ones whose interval changed. One commit, under the caller's txn id.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from ingest.batch.merge.changes import DELETED
from ingest.batch.merge.clauses import When, apply
from ingest.batch.merge.condition import merge_condition
from ingest.batch.merge.target import MergeResult, executed, target_rows
from ingest.batch.staged import RAW
from ingest.platform.delta import delta_table
from ingest.spec.columns import DELETE, OP, SEQUENCE, UID
from ingest.spec.model import Pipeline

VALID_FROM, VALID_TO, CURRENT = "_valid_from", "_valid_to", "_current"
_EXISTING = "__existing"


def version_rows(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The batch's versions with their intervals as far as the batch alone tells."""
    last_position = Window.partitionBy(UID, SEQUENCE).orderBy(
        F.col(f"{RAW}.partition").desc(), F.col(f"{RAW}.offset").desc())
    one_per_sequence = (records.withColumn("__rank", F.row_number().over(last_position))
                        .where(F.col("__rank") == 1).drop("__rank"))
    rows = (target_rows(one_per_sequence)
            .withColumn(DELETED, F.col(OP) == DELETE)
            .withColumn(VALID_FROM, F.col(SEQUENCE)))
    return _intervals(rows)


def _intervals(versions: DataFrame) -> DataFrame:
    following = F.lead(VALID_FROM).over(Window.partitionBy(UID).orderBy(VALID_FROM))
    return (versions.withColumn(VALID_TO, following)
            .withColumn(CURRENT, F.col(VALID_TO).isNull() & ~F.col(DELETED)))


CHANGED = (f"NOT (t.{VALID_TO} <=> s.{VALID_TO}) OR t.{CURRENT} <> s.{CURRENT} "
           "OR struct(t._topic, t._partition, t._offset) <> struct(s._topic, s._partition, s._offset)")


def clauses() -> list[When]:
    """The MERGE's WHEN clauses, for the run and (as SQL) for `ingest plan`."""
    return [When(True, "update *", f"({CHANGED})"), When(False, "insert *")]


def merge_versions(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str]) -> MergeResult:
    table = delta_table(session, pipeline.target)
    timeline = _timeline(table.toDF(), rows, bounds)
    condition = f"{merge_condition(pipeline, bounds)} AND t.{VALID_FROM} = s.{VALID_FROM}"
    builder = table.alias("t").merge(timeline.alias("s"), condition).withSchemaEvolution()
    return executed(apply(builder, clauses()))


def _timeline(target: DataFrame, rows: DataFrame, bounds: dict[str, str]) -> DataFrame:
    """The batch's keys' versions, old and new, one per (key, sequence), intervals recomputed."""
    if "uid_min" in bounds:  # literal bounds let Delta skip the target's other files
        target = target.where(F.col(UID).between(bounds["uid_min"], bounds["uid_max"]))
    keys = rows.select(UID).distinct()
    existing = target.join(keys, UID, "left_semi").withColumn(_EXISTING, F.lit(True))
    # a column added since (add_columns) is null in the stored versions; one the batch no longer
    # has is null in the new ones: the MERGE's schema evolution keeps both (#27.6)
    both = existing.unionByName(rows.withColumn(_EXISTING, F.lit(False)), allowMissingColumns=True)
    columns = [*rows.columns, *(c for c in target.columns if c not in rows.columns)]
    # an equal sequence goes to the later position; an exact replay keeps the row it had
    pick = Window.partitionBy(UID, VALID_FROM).orderBy(
        F.col("_partition").desc(), F.col("_offset").desc(), F.col(_EXISTING).desc())
    one = (both.withColumn("__rank", F.row_number().over(pick)).where(F.col("__rank") == 1)
           .drop("__rank", _EXISTING))
    return _intervals(one.drop(VALID_TO, CURRENT)).select(*columns)
