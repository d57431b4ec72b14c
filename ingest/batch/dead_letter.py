"""The dead-letter table: every record a stage could not handle, with its raw evidence.

Raw key, value and headers are kept as they came, so a record can be replayed
once the cause is fixed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch import ledger
from ingest.batch.decode import RAW, REASON, STAGE
from ingest.batch.ledger import Txn
from ingest.batch.merge import builder_location, builder_name
from ingest.spec.model import DeadLetter

FAILURE_STAGES = ("decode", "transform", "uid")

COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "key", "value", "headers",
           "stage", "reason", "pipeline", "batch_id", "_ingested_at")

# A record's identity in the dead letters: where it is in Kafka, and which pipeline failed it.
KEY = ("pipeline", "_topic", "_partition", "_offset")


def dead_letters(staged: DataFrame, pipeline: str, batch_id: int) -> DataFrame:
    """The batch's failed records in the dead-letter table's shape."""
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
    )


def write(rows: DataFrame, table: DeadLetter, txn: Txn) -> None:
    """MERGE on the Kafka coordinates, under the batch's txn id.

    The target's ledger alone says how far the pipeline got (`run.recovery`), so
    after a crash between this commit and the target's, and a lost checkpoint,
    the batch is read again under a new app id: the txn id cannot skip it here,
    the coordinates do. A record already dead-lettered is never written twice."""
    from delta.tables import DeltaTable

    session = rows.sparkSession
    _create_if_missing(session, table, rows)
    located = DeltaTable.forName(session, table.table) if table.table else DeltaTable.forPath(session, table.path)
    condition = " AND ".join(f"t.{column} = s.{column}" for column in KEY)
    with ledger.txn_settings(session, txn):
        located.alias("t").merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()


def _create_if_missing(session, table: DeadLetter, rows: DataFrame) -> None:
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(session)
    builder = builder.tableName(builder_name(table.table)) if table.table else builder.location(
        builder_location(table.path))
    builder.addColumns(rows.schema).execute()
