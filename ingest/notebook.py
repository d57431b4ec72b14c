"""Small helpers for analysts' notebooks, local Jupyter and Databricks alike.

    from ingest.notebook import spark_session, demo_tables, commits
    spark = spark_session()            # Databricks: the notebook's own `spark`
    tables = demo_tables()             # where `ingest demo` wrote (DATA_ROOT)
    commits(spark, tables.target).show()

Everything returns Spark DataFrames (or plain values), so a notebook can keep
going with Spark SQL. Reading only: nothing here writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_VARIABLE = "DATA_ROOT"
DEFAULT_ROOT = Path(".ingest/demo")
NOTEBOOK_SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
# The ledger entry each ingest commit carries in userMetadata (see ingest.batch.ledger).
LEDGER_SCHEMA = ("ingest INT, pipeline STRING, app_id STRING, batch_id LONG, "
                 "end_offsets MAP<STRING, MAP<STRING, LONG>>, counts MAP<STRING, LONG>")


def spark_session(app_name: str = "ingest-notebook"):
    """The session a notebook should use: the running one on Databricks (or any
    notebook that already has `spark`), else a local one with Delta (local[2],
    or INGEST_SPARK_MASTER)."""
    from ingest.platform.session import get_session

    master = os.environ.get("INGEST_SPARK_MASTER", "local[2]")
    return get_session(app_name, conf=NOTEBOOK_SPARK_CONF, master=master)


@dataclass(frozen=True)
class DemoTables:
    """Where `ingest demo` (pipelines/orders.yaml) keeps its tables."""

    root: str
    target: str
    dead_letter: str
    checkpoint: str
    pipeline: str = "orders"


def demo_tables(root: str | os.PathLike | None = None) -> DemoTables:
    """The demo's locations under `root`, else $DATA_ROOT, else the nearest
    .ingest/demo folder from here upwards (a notebook runs in notebooks/)."""
    chosen = str(root or os.environ.get(ROOT_VARIABLE) or _nearest_default())
    # s3://..., abfss://..., dbfs:/... are kept as written; Path would fold their slashes
    base = chosen.rstrip("/") if ":" in chosen.split("/")[0] else str(Path(chosen).expanduser().resolve())
    return DemoTables(base, f"{base}/tables/orders", f"{base}/dead_letter/orders",
                      f"{base}/checkpoints/orders")


def _nearest_default(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_ROOT).is_dir():
            return folder / DEFAULT_ROOT
    return here / DEFAULT_ROOT


def read_table(spark, location: str, version: int | None = None):
    """A Delta table by path or catalog name; `version` reads it as it was then (time travel)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(location) if _is_path(location) else reader.table(location)


def _is_path(location: str) -> bool:
    return "/" in location or ":" in location


def history(spark, location: str):
    """DESCRIBE HISTORY of a Delta table by path or catalog name."""
    name = f"delta.`{location}`" if _is_path(location) else location
    return spark.sql(f"DESCRIBE HISTORY {name}")


def commits(spark, location: str, pipeline: str | None = None):
    """The commits ingest made, oldest first, with the ledger entry as columns:
    version, timestamp, operation, pipeline, app_id, batch_id, end_offsets
    (topic -> partition -> next offset), counts (read, unique and per stage,
    when the version recorded them), operationMetrics, userMetadata."""
    from pyspark.sql import functions as F

    entries = (history(spark, location)
               .withColumn("ledger", F.from_json("userMetadata", LEDGER_SCHEMA))
               .where(F.col("ledger.ingest") == 1))
    if pipeline:
        entries = entries.where(F.col("ledger.pipeline") == pipeline)
    return entries.select("version", "timestamp", "operation", "ledger.pipeline", "ledger.app_id",
                          "ledger.batch_id", "ledger.end_offsets", "ledger.counts",
                          "operationMetrics", "userMetadata").orderBy("version")


def commit_of_offset(spark, location: str, topic: str, partition: int, offset: int,
                     pipeline: str | None = None):
    """The first commit whose batch read past `offset` of that partition: the one
    that brought the record in. None if no commit did yet."""
    from pyspark.sql import functions as F

    end = F.element_at(F.element_at("end_offsets", F.lit(topic)), F.lit(str(partition)))
    found = (commits(spark, location, pipeline).where(end > offset)
             .orderBy("version").limit(1).collect())
    return found[0] if found else None


def dead_letters(spark, location: str):
    """The dead-letter table with the raw bytes decoded as text for reading:
    `value_text`, `key_text` and `header_text` (key, value); UTF-8, bytes that are
    not valid UTF-8 replaced by \ufffd."""
    from pyspark.sql import functions as F

    def text(column):
        return F.make_valid_utf8(column.cast("string"))

    return (read_table(spark, location)
            .withColumn("value_text", text(F.col("value")))
            .withColumn("key_text", text(F.col("key")))
            .withColumn("header_text", F.transform(
                "headers", lambda h: F.struct(h["key"].alias("key"), text(h["value"]).alias("value")))))


BATCH_COLUMNS = ("version LONG, timestamp TIMESTAMP, batch_id LONG, offsets LONG, read LONG, "
                 "inserted LONG, updated LONG, dead_letters LONG, filtered LONG, duplicates_removed LONG")


def batches(spark, target: str, pipeline: str | None = None):
    """One row per MERGE commit of the target, oldest first: version, timestamp,
    batch_id, offsets (how far the batch moved, all partitions together; a
    partition's first batch counts from offset 0), read, inserted, updated,
    dead_letters, filtered, and duplicates_removed: records read that were neither
    inserted, updated, dead letters nor filtered, that is copies of a uid seen
    before, in the batch or earlier. The per-batch counts come from the ledger
    entry (`counts`); commits made before ingest recorded them show nulls there.
    A table's history is small: it is read on the driver."""
    merges = commits(spark, target, pipeline).where("operation = 'MERGE'").collect()
    reached: dict[tuple[str, str], int] = {}
    rows = [_batch_row(commit, reached) for commit in merges]
    return spark.createDataFrame(rows, BATCH_COLUMNS)


def _batch_row(commit, reached: dict) -> tuple:
    moved = 0
    for topic, parts in (commit.end_offsets or {}).items():
        for partition, end in parts.items():
            moved += end - reached.get((topic, partition), 0)
            reached[(topic, partition)] = end
    metrics = commit.operationMetrics or {}
    inserted = int(metrics.get("numTargetRowsInserted", 0))
    updated = int(metrics.get("numTargetRowsUpdated", 0))
    counts = commit.counts
    if not counts:
        return (commit.version, commit.timestamp, commit.batch_id, moved, None, inserted, updated,
                None, None, None)
    dead = sum(counts.get(stage, 0) for stage in ("decode", "transform", "uid"))
    filtered = counts.get("filtered", 0)
    duplicates = counts["read"] - inserted - updated - dead - filtered
    return (commit.version, commit.timestamp, commit.batch_id, moved, counts["read"], inserted, updated,
            dead, filtered, duplicates)
