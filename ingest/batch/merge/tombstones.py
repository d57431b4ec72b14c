"""Upsert by Kafka key with tombstones: a key with a null value deletes that key.

`uid: {key: true}` in an upsert, without `cdc`: records are versions of their
key, ordered as every upsert orders them (`order_by`, ties by Kafka timestamp,
then topic, partition, offset), and a tombstone deletes the key under
`target.deletes` (soft: the row stays with `_deleted = true`; hard: it goes,
and the delete is logged in `<target>_deletes` as cdc's hard deletes are).

A tombstone has no payload, so no `order_by` value of its own. It deletes what
came before it in Kafka order, so it takes the `order_by` of the key's version
it deletes: the latest (in the upsert's order) of the key's versions that
precede it in Kafka order (within one partition by offset; across partitions
by Kafka timestamp, then topic, partition, offset), in the batch or in the
target. A soft-deleted row keeps that version's values and
`order_by`. So a late version older than the deleted one loses to the delete
and cannot bring the key back; a version with a later `order_by` (or an equal
one written later) brings it back. A tombstone of a key nothing precedes has
no `order_by` (null) and loses to any version. The result is the same whether
the versions and the tombstone come in one batch or spread over batches.

The target also holds `_op` (`u` for a version, `d` for a tombstone), as a cdc
target does: the MERGE's delete clause reads it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ingest.batch.merge import delete_log
from ingest.batch.merge.changes import DELETED
from ingest.batch.merge.clauses import When, apply
from ingest.batch.merge.condition import merge_condition, upsert_condition
from ingest.batch.merge.target import MergeResult, executed, target_rows
from ingest.batch.staged import RAW, REASON, STAGE, TOMBSTONE
from ingest.platform.delta import delta_table
from ingest.spec.columns import DELETE, OP, UID
from ingest.spec.model import Pipeline

UPDATE = "u"
_PRIOR = "__prior"
_PRIOR_TIMESTAMP = "__prior_timestamp"
# a row's place in the upsert's order, after `order_by` (the target's and the log's columns)
_TIES = ("_kafka_timestamp", "_topic", "_partition", "_offset")


def mark(decoded: DataFrame) -> DataFrame:
    """A record with a key and a null value is a delete of that key, not a decode failure;
    it gets `TOMBSTONE` true and a null payload."""
    tombstone = F.col(f"{RAW}.value").isNull() & F.col(f"{RAW}.key").isNotNull()
    payload = [c for c in decoded.columns if c not in (RAW, STAGE, REASON)]
    return decoded.select(
        RAW,
        F.when(tombstone, F.lit(None)).otherwise(F.col(STAGE)).cast("string").alias(STAGE),
        F.when(tombstone, F.lit(None)).otherwise(F.col(REASON)).cast("string").alias(REASON),
        *[F.when(tombstone, F.lit(None)).otherwise(F.col(f"`{c}`")).alias(c) for c in payload],
        tombstone.alias(TOMBSTONE))


def change_rows(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The batch's versions and tombstones as target rows with `_op` (and, soft,
    `_deleted`); a tombstone carries the values and `order_by` of the version it
    deletes, where the batch has one before it. Not yet one per key: a tombstone may
    still take its order from the target (`merge_tombstones`)."""
    order_by = pipeline.target.order_by
    tombstone = F.col(TOMBSTONE)
    payload = [c for c in records.columns if c not in (RAW, STAGE, REASON, UID, TOMBSTONE)]
    raw = [_kafka_clock(), *[F.col(f"{RAW}.{c}") for c in ("topic", "partition", "offset")]]
    before = (Window.partitionBy(UID).orderBy(*raw)
              .rowsBetween(Window.unboundedPreceding, -1))
    rank = F.when(~tombstone, F.struct(F.col(f"`{order_by}`"), *raw))
    prior = F.max_by(F.struct(*[F.col(f"`{c}`") for c in payload],
                              F.col(f"{RAW}.timestamp").alias(_PRIOR_TIMESTAMP)), rank).over(before)
    # a tombstone is no earlier than the version it deletes, whatever its producer's clock said:
    # its ties with that version go to the offset (docs/cdc.md)
    clamped = F.col(RAW).withField("timestamp", F.when(
        tombstone, F.greatest(F.col(f"{RAW}.timestamp"), F.col(f"{_PRIOR}.{_PRIOR_TIMESTAMP}")))
        .otherwise(F.col(f"{RAW}.timestamp")))
    rows = records.withColumn(_PRIOR, prior).select(
        clamped.alias(RAW), UID, TOMBSTONE,
        *[F.when(tombstone, F.col(f"{_PRIOR}.`{c}`")).otherwise(F.col(f"`{c}`")).alias(c) for c in payload])
    rows = rows.withColumn(OP, F.when(tombstone, F.lit(DELETE)).otherwise(F.lit(UPDATE)))
    if pipeline.target.deletes == "soft":
        rows = rows.withColumn(DELETED, tombstone)
    return target_rows(rows.drop(TOMBSTONE))


def _kafka_clock() -> Column:
    """The record's Kafka timestamp, but never earlier than one before it in its partition: within
    a partition the offset orders (a producer's clock behind another's, or an explicit older
    timestamp, cannot put a tombstone before the version it follows); across partitions the
    timestamps do."""
    partition = Window.partitionBy(f"{RAW}.topic", f"{RAW}.partition").orderBy(f"{RAW}.offset") \
        .rowsBetween(Window.unboundedPreceding, 0)
    return F.max(F.col(f"{RAW}.timestamp")).over(partition)


def merge_tombstones(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str],
                     logs_deletes: bool = True) -> MergeResult:
    """One MERGE commit into the target; with hard deletes the delete log's own commit
    first (`logs_deletes`: none in a batch without tombstones). Both under the txn id the
    caller has set on the session."""
    table = delta_table(session, pipeline.target)
    condition = merge_condition(pipeline, bounds)
    rows = _last_per_key(_after_target_versions(rows, table.toDF(), pipeline, bounds), pipeline)
    if pipeline.target.deletes == "hard":
        rows = delete_log.after_logged_deletes(session, rows, pipeline.target, bounds,
                                               pipeline.target.order_by, _TIES, logs_deletes)
    builder = table.alias("t").merge(rows.alias("s"), condition).withSchemaEvolution()
    return executed(apply(builder, clauses(pipeline)))


def _last_per_key(rows: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Each key's last version or tombstone in the upsert's order (`one_per_uid`'s, on
    the target rows' coordinates)."""
    order = [F.col(f"`{pipeline.target.order_by}`").desc_nulls_last(), *[F.col(c).desc() for c in _TIES]]
    rank = F.row_number().over(Window.partitionBy(UID).orderBy(*order))
    return rows.withColumn("__rank", rank).where(F.col("__rank") == 1).drop("__rank")


def using(pipeline: Pipeline) -> str:
    """The MERGE's source, in words for `ingest plan`."""
    rows = ("the batch, each key's last version or tombstone by order_by, Kafka timestamp, "
            "position; a tombstone takes the order_by of the version before it")
    if pipeline.target.deletes == "hard":
        rows += "; minus versions older than the delete log's entry for their key"
    return f"USING ({rows}) AS s"


def clauses(pipeline: Pipeline) -> list[When]:
    """The MERGE's WHEN clauses, for the run and (as SQL) for `ingest plan`."""
    later, is_delete = upsert_condition(pipeline), f"s.{OP} = '{DELETE}'"
    if pipeline.target.deletes == "hard":
        return [When(True, "delete", f"{is_delete} AND {later}"),
                When(True, "update *", later),
                When(False, "insert *", f"s.{OP} <> '{DELETE}'")]
    return [When(True, "update *", later), When(False, "insert *")]


def _position(alias: str) -> Column:
    return F.struct(*[F.col(f"{alias}.{c}").alias(c) for c in _TIES])


def _after_target_versions(rows: DataFrame, existing: DataFrame, pipeline: Pipeline,
                           bounds: dict[str, str]) -> DataFrame:
    """A tombstone takes the target row's values and `order_by` when that row precedes it
    in Kafka order and is later in the upsert's order than what the batch gave it."""
    order_by = f"`{pipeline.target.order_by}`"
    if "uid_min" in bounds:  # a literal bound lets Delta skip the target's files
        existing = existing.where(F.col(UID).between(bounds["uid_min"], bounds["uid_max"]))
    payload = [c for c in rows.columns if c not in (UID, OP, DELETED, *_TIES, "_ingested_at")]
    found = existing.select(UID, *_TIES, *[c for c in payload if c in existing.columns])
    s_order, t_order = F.col(f"s.{order_by}"), F.col(f"t.{order_by}")
    same_partition = (F.col("t._topic") == F.col("s._topic")) & (F.col("t._partition") == F.col("s._partition"))
    precedes = F.when(same_partition, F.col("t._offset") < F.col("s._offset")).otherwise(
        _position("t") < _position("s"))
    takes = (F.col(f"s.{OP}") == DELETE) & F.col(f"t.{UID}").isNotNull() & precedes \
        & ((t_order > s_order) | (s_order.isNull() & t_order.isNotNull()))
    joined = rows.alias("s").join(found.alias("t"), F.col(f"s.{UID}") == F.col(f"t.{UID}"), "left")
    def column(c: str) -> Column:
        if c in payload and c in found.columns:
            return F.when(takes, F.col(f"t.`{c}`")).otherwise(F.col(f"s.`{c}`")).alias(c)
        if c == "_kafka_timestamp":  # no earlier than the version it deletes, as in change_rows
            return F.when(takes, F.greatest(F.col(f"s.{c}"), F.col(f"t.{c}"))).otherwise(
                F.col(f"s.{c}")).alias(c)
        return F.col(f"s.`{c}`").alias(c)
    return joined.select(*[column(c) for c in rows.columns])
