"""MERGE one batch into the target table, keyed by `_uid`.

insert_only: a uid already in the table is left as it is (the first copy wins).
upsert: a matched row is replaced only by a later `order_by` (ties: later Kafka
position), so an old record arriving late never overwrites a newer one.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.merge_condition import merge_condition, upsert_condition
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.batch.uid import UID
from ingest.platform.delta import builder_location, builder_name, delta_table
from ingest.spec.model import Pipeline, Target

COORDINATE_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "_ingested_at")


@dataclass(frozen=True)
class MergeResult:
    inserted: int
    updated: int
    deleted: int = 0
    # Delta skipped the MERGE (no metrics row): the txn version was already committed
    skipped: bool = False


def target_rows(records: DataFrame) -> DataFrame:
    """`_uid`, the payload columns, then the source coordinates."""
    payload = [c for c in records.columns if c not in (RAW, STAGE, REASON, UID)]
    return records.select(
        UID, *[F.col(f"`{c}`") for c in payload],
        F.col(f"{RAW}.topic").alias("_topic"),
        F.col(f"{RAW}.partition").alias("_partition"),
        F.col(f"{RAW}.offset").alias("_offset"),
        F.col(f"{RAW}.timestamp").alias("_kafka_timestamp"),
        F.current_timestamp().alias("_ingested_at"),
    )


def target_schema(session, target: Target):
    return delta_table(session, target).toDF().schema


def create_table(session, target: Target, rows: DataFrame) -> None:
    """Create the target with the batch's columns, if no one has yet."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(session)
    builder = builder.tableName(builder_name(target.table)) if target.table else builder.location(
        builder_location(target.path))
    builder = builder.addColumns(rows.schema)
    if target.partition_by:
        builder = builder.partitionedBy(*target.partition_by)
    if target.cluster_by:
        builder = builder.clusterBy(*target.cluster_by)
    builder.execute()


def compared_columns(rows: DataFrame, existing: DataFrame) -> tuple[str, ...]:
    """The payload columns an update could change; () when the batch brings a column the
    table lacks (schema evolution: every matched row then changes)."""
    own = {UID, *COORDINATE_COLUMNS}
    have = {c.lower() for c in existing.columns}
    payload = [c for c in rows.columns if c not in own]
    if any(c.lower() not in have for c in payload):
        return ()
    return tuple(payload)


def changing_rows(rows: DataFrame, existing: DataFrame, on: str, update: str) -> DataFrame:
    """The batch's rows an upsert would insert or really update. Delta's MERGE with
    an insert clause rewrites every file holding a matched uid, whatever the update
    condition says, so rows that would change nothing (an older version, the same
    values again) are dropped before it. Read with the MERGE's own bounded condition."""
    unchanged = (rows.alias("s").join(existing.alias("t"), F.expr(on), "inner")
                 .where(~F.coalesce(F.expr(update), F.lit(False)))
                 .select(F.col(f"s.{UID}").alias(UID)))
    return rows.join(unchanged, UID, "left_anti")


def merge_batch(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str]) -> MergeResult:
    """One MERGE, one commit. The caller sets the txn id on `session` around it."""
    target = pipeline.target
    table = delta_table(session, target)
    condition = merge_condition(pipeline, bounds)
    if target.mode == "upsert":
        payload = compared_columns(rows, table.toDF())
        rows = changing_rows(rows, table.toDF(), condition, upsert_condition(pipeline, payload))
    builder = table.alias("t").merge(rows.alias("s"), condition).withSchemaEvolution()
    if target.mode == "upsert":
        builder = builder.whenMatchedUpdateAll(condition=upsert_condition(pipeline, payload))
    metrics = builder.whenNotMatchedInsertAll().execute().collect()
    row = metrics[0].asDict() if metrics else {}
    return MergeResult(
        inserted=int(row.get("num_inserted_rows") or 0),
        updated=int(row.get("num_updated_rows") or 0),
        skipped=not metrics,
    )
