"""The dead-letter table: every record a stage could not handle, with its raw evidence.

Raw key, value and headers are kept as they came, so a record can be replayed
once the cause is fixed.
"""

from __future__ import annotations

from typing import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from ingest.batch.commit import ledger
from ingest.batch.commit.ledger import Txn
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.platform.delta import delta_table, table_builder_at
from ingest.spec.model import DeadLetter

FAILURE_STAGES = ("decode", "transform", "uid")

COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "key", "value", "headers",
           "stage", "reason", "pipeline", "batch_id", "_ingested_at", "_topic_id")

# A record's identity in the dead letters: where it is in Kafka, and which pipeline failed it.
# A topic deleted and created again under the same name reuses offsets: its id tells the two
# apart. A row without one (written before ids were, or none known) matches either.
KEY = ("pipeline", "_topic", "_partition", "_offset")
TOPIC_ID = "_topic_id"
_SAME_TOPIC = f"(t.{TOPIC_ID} = s.{TOPIC_ID} OR t.{TOPIC_ID} IS NULL OR s.{TOPIC_ID} IS NULL)"


def dead_letters(staged: DataFrame, pipeline: str, batch_id: int,
                 topic_ids: Mapping[str, str] | None = None) -> DataFrame:
    """The batch's failed records in the dead-letter table's shape; `topic_ids`: each
    topic's id (`kafka.admin.topic_ids`)."""
    failed = staged.where(F.col(STAGE).isin(*FAILURE_STAGES))
    return failed.select(
        F.col(f"{RAW}.topic").alias("_topic"),
        F.col(f"{RAW}.partition").alias("_partition"),
        F.col(f"{RAW}.offset").alias("_offset"),
        F.col(f"{RAW}.timestamp").alias("_kafka_timestamp"),
        F.col(f"{RAW}.key").alias("key"),
        F.col(f"{RAW}.value").alias("value"),
        F.col(f"{RAW}.headers").alias("headers"),
        F.col(STAGE).alias("stage"),
        F.col(REASON).alias("reason"),
        F.lit(pipeline).alias("pipeline"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.current_timestamp().alias("_ingested_at"),
        _topic_id(topic_ids, F.col(f"{RAW}.topic")).alias(TOPIC_ID),
    )


def _topic_id(topic_ids: Mapping[str, str] | None, topic: Column) -> Column:
    if not topic_ids:
        return F.lit(None).cast("string")
    return F.create_map(*[F.lit(part) for pair in sorted(topic_ids.items()) for part in pair])[topic]


def write(rows: DataFrame, table: DeadLetter, txn: Txn, widen_lost: bool = False) -> None:
    """MERGE on the Kafka coordinates and topic id, under the batch's txn id.

    The target's ledger alone says how far the pipeline got (`stream.recovery`), so
    after a crash between this commit and the target's, and a lost checkpoint,
    the batch is read again under a new app id: the txn id cannot skip it here,
    the coordinates do. A record already dead-lettered is never written twice.

    `widen_lost`: a lost range found again with a further end replaces the reason of
    the row at its first offset (the txn version, the range's end, lets only a
    wider range through)."""
    session = rows.sparkSession
    _create_if_missing(session, table, rows)
    located = delta_table(session, table)
    _upgrade_if_older(session, table, located)
    condition = " AND ".join([f"t.{column} = s.{column}" for column in KEY] + [_SAME_TOPIC])
    with ledger.txn_settings(session, txn):
        merge = located.alias("t").merge(rows.alias("s"), condition)
        if widen_lost:
            merge = merge.whenMatchedUpdate("t.stage = s.stage", {
                "reason": "s.reason", "_ingested_at": "s._ingested_at", TOPIC_ID: f"s.{TOPIC_ID}"})
        merge.whenNotMatchedInsertAll().execute()


def _upgrade_if_older(session, table: DeadLetter, located) -> None:
    """A table created before dead letters carried the topic id gets the column (null in
    its rows, which then match by coordinates alone); one created NOT NULL where a lost
    range's row has no value (its batch id, when recovery finds it before any batch)
    lets the column hold null."""
    name = table.table or f"delta.`{table.path}`"
    fields = located.toDF().schema.fields
    if TOPIC_ID not in [field.name for field in fields]:
        session.sql(f"ALTER TABLE {name} ADD COLUMNS ({TOPIC_ID} STRING)")
    for field in fields:
        if not field.nullable:
            session.sql(f"ALTER TABLE {name} ALTER COLUMN {field.name} DROP NOT NULL")


def _create_if_missing(session, table: DeadLetter, rows: DataFrame) -> None:
    builder = table_builder_at(session, table)
    # Every column nullable: the first rows' literals (pipeline, batch id) would otherwise make
    # their columns NOT NULL, and a lost range's row, which has no batch id, could never land.
    builder = builder.addColumns(StructType([StructField(f.name, f.dataType, True, f.metadata)
                                             for f in rows.schema.fields]))
    for key, value in table.properties.items():  # ingest sets none of its own here
        builder = builder.property(key, value)
    builder.execute()
