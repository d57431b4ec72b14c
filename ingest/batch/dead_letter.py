"""The dead-letter table: every record a stage could not handle, with its raw evidence.

Raw key, value and headers are kept as they came, so a record can be replayed
once the cause is fixed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.decode import RAW, REASON, STAGE
from ingest.batch.ledger import Txn
from ingest.spec.model import DeadLetter

FAILURE_STAGES = ("decode", "transform", "uid")

COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "key", "value", "headers",
           "stage", "reason", "pipeline", "batch_id", "_ingested_at")


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
    """Append under the batch's idempotent txn id: a replayed batch appends nothing."""
    writer = (rows.write.format("delta").mode("append")
              .option("txnAppId", txn.app_id)
              .option("txnVersion", str(txn.version))
              .option("userMetadata", txn.metadata))
    if table.table:
        writer.saveAsTable(table.table)
    else:
        writer.save(table.path)
