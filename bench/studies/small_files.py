"""MERGE batch time on a target of 1,000 small files against the same target compacted.

What `ingest maintain --optimize` (or `maintenance.optimize_every`) buys. Both
tables hold the same rows (uids UUIDv7-like, so time ordered); one is written
as `--files` small files, the other is a copy compacted with OPTIMIZE. The same
batch (`--batch` rows: new uids plus 2% already in the table) is merged into
each with ingest's own `merge_batch` and its uid bounds, three times in
alternating order, each table put back with RESTORE after a run. The figure is
the ratio of the medians, measured side by side in one Spark application.

    bench/run small_files [--rows 200000] [--files 1000] [--batch 5000] [--out bench/results/small_files.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from bench import RESULTS
from ingest.batch.merge.upsert import merge_batch
from ingest.platform.session import get_session
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
        "spark.databricks.delta.snapshotPartitions": "2"}


def rows(spark, start: int, count: int, partitions: int):
    """Time-ordered uids (a zero-padded counter behind a fixed prefix sorts as UUIDv7s do)."""
    return (spark.range(start, start + count, numPartitions=partitions)
            .select(F.format_string("0190aaaa-%012d", F.col("id")).alias("_uid"),
                    F.col("id").cast("string").alias("order_id"), (F.col("id") % 1000).cast("double").alias("amount"),
                    F.timestamp_seconds(F.lit(1_790_000_000) + F.col("id")).alias("ts"),
                    F.lit("orders").alias("_topic"), F.lit(0).alias("_partition"), F.col("id").alias("_offset"),
                    F.timestamp_seconds(F.lit(1_790_000_000) + F.col("id")).alias("_kafka_timestamp"),
                    F.current_timestamp().alias("_ingested_at")))


def pipeline(path: str) -> Pipeline:
    return Pipeline(name="bench", source=Source(KafkaSource("unused:9092", ("orders",)), schema="order_id STRING"),
                    uid=Uid(header="message-id"), target=Target(path=path), checkpoint=path + "_cp",
                    dead_letter=DeadLetter(path=path + "_dl"))


def merge_once(spark, path: str, batch, bounds) -> float:
    from delta.tables import DeltaTable

    version = DeltaTable.forPath(spark, path).history(1).first().version
    began = time.perf_counter()
    merge_batch(spark, batch, pipeline(path), bounds)
    seconds = time.perf_counter() - began
    DeltaTable.forPath(spark, path).restoreToVersion(version)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/run small_files", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "small_files.json"))
    args = parser.parse_args()
    spark = get_session("bench-small-files", conf=CONF, master="local[2]")
    from delta.tables import DeltaTable

    root = Path(tempfile.mkdtemp(prefix="bench-small-files-"))
    try:
        small, compacted = str(root / "small"), str(root / "compacted")
        rows(spark, 0, args.rows, args.files).write.format("delta").save(small)
        shutil.copytree(small, compacted)
        DeltaTable.forPath(spark, compacted).optimize().executeCompaction()
        files = {name: DeltaTable.forPath(spark, p).detail().first().numFiles
                 for name, p in (("small", small), ("compacted", compacted))}
        known = max(1, args.batch // 50)  # 2% of the batch re-sends the table's newest uids
        batch = rows(spark, args.rows - known, args.batch, 2).cache()
        batch.count()
        ends = batch.agg(F.min("_uid").alias("lo"), F.max("_uid").alias("hi")).first()
        bounds = {"uid_min": ends.lo, "uid_max": ends.hi}
        merge_once(spark, small, batch, bounds)  # warm-up: JIT and class loading for both
        merge_once(spark, compacted, batch, bounds)
        times = {"small": [], "compacted": []}
        for run in range(args.runs):
            for name in (("small", "compacted") if run % 2 == 0 else ("compacted", "small")):
                times[name].append(merge_once(spark, small if name == "small" else compacted, batch, bounds))
        medians = {name: statistics.median(values) for name, values in times.items()}
        result = {"rows": args.rows, "batch": args.batch, "files": files, "seconds": times,
                  "median_seconds": medians, "ratio_small_to_compacted": medians["small"] / medians["compacted"]}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"MERGE of {args.batch} rows into {args.rows} rows: {files['small']} files "
              f"{medians['small']:.2f}s, compacted to {files['compacted']} file(s) {medians['compacted']:.2f}s, "
              f"ratio {result['ratio_small_to_compacted']:.2f}")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
