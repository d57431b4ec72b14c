"""upsert's edges (issue 20.6): ties across partitions, a null order_by, unchanged rows."""

from datetime import datetime, timezone

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from ingest.batch.merge.target import create_table, target_rows
from ingest.batch.merge.upsert import merge_batch
from ingest.batch.processor import summarize
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.batch.uid import one_per_uid, with_uid
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


def at(minute: int) -> datetime:
    return datetime(2026, 11, 1, 10, minute, tzinfo=timezone.utc)


def staged(spark, rows):
    """(partition, offset, kafka minute, customer, version, name) as the processor stages them."""
    frame = spark.createDataFrame(
        [(("t", partition, offset, at(minute)), customer, version, name)
         for partition, offset, minute, customer, version, name in rows],
        f"{RAW} STRUCT<topic: STRING, partition: INT, offset: LONG, timestamp: TIMESTAMP>, "
        "customer STRING, version LONG, name STRING")
    frame = frame.select(F.lit(None).cast("string").alias(STAGE), F.lit(None).cast("string").alias(REASON), "*")
    return with_uid(frame, Uid(field="customer"), "version")


def pipeline_for(path):
    return Pipeline(name="customers", source=Source(KafkaSource("unused:9092", ("t",)), format="json"),
                    uid=Uid(field="customer"), checkpoint=path + "_cp", dead_letter=DeadLetter(path=path + "_dl"),
                    target=Target(path=path, mode="upsert", order_by="version"))


def upsert(spark, pipeline, rows):
    frame = staged(spark, rows)
    summary = summarize(frame, pipeline)
    batch = target_rows(one_per_uid(frame.where(F.col(STAGE).isNull()), "upsert", "version"))
    create_table(spark, pipeline.target, batch)
    return merge_batch(spark, batch, pipeline, summary.bounds)


def names(spark, pipeline):
    return {r.customer: r.name for r in spark.read.format("delta").load(pipeline.target.path).collect()}


def test_a_tie_goes_to_the_later_record_not_the_higher_partition(spark, tmp_path):
    pipeline = pipeline_for(str(tmp_path / "customers"))
    upsert(spark, pipeline, [(1, 0, 0, "c1", 5, "older on partition 1")])
    upsert(spark, pipeline, [(0, 0, 7, "c1", 5, "newer on partition 0")])
    # within one batch too
    upsert(spark, pipeline, [(1, 1, 8, "c2", 5, "older on partition 1"), (0, 1, 9, "c2", 5, "newer on 0")])
    assert names(spark, pipeline) == {"c1": "newer on partition 0", "c2": "newer on 0"}


def test_a_null_order_by_is_a_dead_letter_with_its_reason(spark):
    rows = staged(spark, [(0, 0, 0, "c1", None, "no version"), (0, 1, 1, "c2", 3, "fine")])
    found = {r.customer: (r[STAGE], r[REASON]) for r in rows.collect()}
    assert found["c2"] == (None, None)
    assert found["c1"] == ("uid", "order_by column 'version' is null; upsert needs it to tell the latest version")


def test_an_upsert_that_changes_nothing_rewrites_no_file(spark, tmp_path):
    pipeline = pipeline_for(str(tmp_path / "customers"))
    upsert(spark, pipeline, [(0, 0, 0, "c1", 5, "Ann"), (0, 1, 0, "c2", 5, "Bob")])
    table = DeltaTable.forPath(spark, pipeline.target.path)
    result = upsert(spark, pipeline, [(1, 0, 3, "c1", 5, "Ann"),  # a re-send: same version and values
                                      (1, 1, 3, "c2", 4, "Old")])  # an older version
    metrics = table.history(1).first().operationMetrics
    assert (result.inserted, result.updated) == (0, 0)
    assert (metrics["numTargetFilesRemoved"], metrics["numTargetRowsCopied"]) == ("0", "0"), metrics
    assert names(spark, pipeline) == {"c1": "Ann", "c2": "Bob"}
    changed = upsert(spark, pipeline, [(1, 2, 4, "c1", 5, "Anne")])  # same version, new values: a tie, later
    assert (changed.updated, names(spark, pipeline)["c1"]) == (1, "Anne")
