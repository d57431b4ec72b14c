"""The target table itself: its rows from a batch's staged records (`_uid`, the
payload, the Kafka coordinates), its creation, and what a MERGE into it reports.
Every merge mode builds on these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.merge.properties import ingest_properties
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.platform.delta import delta_table, table_builder_at
from ingest.spec.columns import UID
from ingest.spec.model import Target

# a user's session default for new tables (this prefix, then the property's name without
# `delta.`) wins over ingest's own value for that property
SESSION_DEFAULTS = "spark.databricks.delta.properties.defaults."
DEFAULT_CHECKPOINT_INTERVAL = SESSION_DEFAULTS + "checkpointInterval"
COORDINATE_COLUMNS = ("_topic", "_partition", "_offset", "_kafka_timestamp", "_ingested_at")


@dataclass(frozen=True)
class MergeResult:
    inserted: int
    updated: int
    deleted: int = 0
    # Delta skipped the MERGE (no metrics row): the txn version was already committed
    skipped: bool = False


def executed(builder) -> MergeResult:
    """Run a MERGE and read its metrics row (none: Delta skipped it, the txn version
    was already committed)."""
    metrics = builder.execute().collect()
    row = metrics[0].asDict() if metrics else {}
    return MergeResult(inserted=int(row.get("num_inserted_rows") or 0),
                       updated=int(row.get("num_updated_rows") or 0),
                       deleted=int(row.get("num_deleted_rows") or 0), skipped=not metrics)


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


def creation_properties(session, target: Target, needed: Mapping[str, str] | None = None,
                        checkpoints_beside: bool = True) -> dict[str, str]:
    """ingest's properties where the session has no default of its own, then what the
    pipeline's settings need (`needed`), then the pipeline's `properties`, which win.
    `checkpoints_beside`: the run checkpoints the table itself, beside the batches
    (`warm_state`), so Delta's own checkpoint in the committing thread comes rarely; a table
    the run does not checkpoint (the delete log) keeps Delta's default interval."""
    chosen = {key: value for key, value in ingest_properties(target).items()
              if session.conf.get(SESSION_DEFAULTS + key.removeprefix("delta."), None) is None
              and (checkpoints_beside or key != "delta.checkpointInterval")}
    return {**chosen, **(needed or {}), **target.properties}


def create_table(session, target: Target, rows: DataFrame, needed: Mapping[str, str] | None = None,
                 checkpoints_beside: bool = True) -> None:
    """Create the target with the batch's columns, if no one has yet."""
    builder = table_builder_at(session, target)
    builder = builder.addColumns(rows.schema)
    for key, value in creation_properties(session, target, needed, checkpoints_beside).items():
        builder = builder.property(key, value)
    if target.partition_by:
        builder = builder.partitionedBy(*target.partition_by)
    if target.cluster_by:
        builder = builder.clusterBy(*target.cluster_by)
    builder.execute()
