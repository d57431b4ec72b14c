"""The MERGE's literal bounds let Delta skip target files, and never change the result."""

from pyspark.sql import functions as F

from ingest.batch.merge.target import create_table
from ingest.batch.merge.upsert import merge_batch
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid
from tests.spark.batch.scan_metrics import files_read_since, last_execution_id

FILES = 40


def target_frame(spark, first: int, last: int):
    """Rows shaped like the target, with time-ordered uids (as UUIDv7s are)."""
    return spark.range(first, last).select(
        F.format_string("01890000-%012d", "id").alias("_uid"),
        F.col("id").cast("double").alias("amount"),
        F.lit("t").alias("_topic"), F.lit(0).alias("_partition"), F.col("id").alias("_offset"),
        F.current_timestamp().alias("_kafka_timestamp"), F.current_timestamp().alias("_ingested_at"))


def pipeline_for(path):
    return Pipeline(name="bounds", source=Source(KafkaSource("unused:9092", ("t",)), format="string"),
                    uid=Uid(coordinates=True), target=Target(path=path), checkpoint=path + "_cp",
                    dead_letter=DeadLetter(path=path + "_dl"))


def files_scanned_by_merge(spark, path, bounded: bool) -> int:
    pipeline = pipeline_for(path)
    existing = target_frame(spark, 0, 40_000)
    create_table(spark, pipeline.target, existing)
    existing.repartitionByRange(FILES, "_uid").sortWithinPartitions("_uid") \
        .write.format("delta").mode("append").save(path)
    batch = target_frame(spark, 39_990, 40_100)  # 10 duplicates of the newest rows, 100 new
    bounds = {"uid_min": batch.agg(F.min("_uid")).first()[0],
              "uid_max": batch.agg(F.max("_uid")).first()[0]} if bounded else {}
    mark = last_execution_id(spark)
    result = merge_batch(spark, batch, pipeline, bounds)
    scanned = files_read_since(spark, mark)
    assert result.inserted == 100
    assert spark.read.format("delta").load(path).count() == 40_100
    return scanned


def test_bounds_prune_target_files(spark, tmp_path):
    naive = files_scanned_by_merge(spark, str(tmp_path / "naive"), bounded=False)
    bounded = files_scanned_by_merge(spark, str(tmp_path / "bounded"), bounded=True)
    assert naive >= FILES
    assert bounded <= naive // 4, f"bounded MERGE read {bounded} files, naive {naive}"
