"""Bounds and uids do not depend on the session time zone (issue 20.5)."""

from contextlib import contextmanager
from datetime import datetime, timezone

from pyspark.sql import functions as F

from ingest.batch.merge.target import create_table, target_rows
from ingest.batch.merge.upsert import merge_batch
from ingest.batch.processor import summarize
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.batch.uid import FIELD_SEPARATOR, one_per_uid, with_uid
from ingest.spec.columns import UID
from ingest.spec.model import DeadLetter, DedupHorizon, KafkaSource, Pipeline, Source, Target, Uid

TIME_ZONE = "spark.sql.session.timeZone"


@contextmanager
def session_zone(spark, zone: str):
    saved = spark.conf.get(TIME_ZONE)
    spark.conf.set(TIME_ZONE, zone)
    try:
        yield
    finally:
        spark.conf.set(TIME_ZONE, saved)


def staged(spark, rows):
    """Rows shaped as the processor stages them: the raw Kafka columns, stage, reason, payload."""
    frame = spark.createDataFrame(
        [((topic, partition, offset, datetime(2026, 1, 1, tzinfo=timezone.utc)), order_id, ts)
         for topic, partition, offset, order_id, ts in rows],
        f"{RAW} STRUCT<topic: STRING, partition: INT, offset: LONG, timestamp: TIMESTAMP>, "
        "order_id STRING, ts TIMESTAMP")
    return frame.select(F.lit(None).cast("string").alias(STAGE), F.lit(None).cast("string").alias(REASON),
                        "*")


ORDER_UID = Uid(field="order_id")


def pipeline_for(path, uid=ORDER_UID):
    return Pipeline(name="zones", source=Source(KafkaSource("unused:9092", ("t",)), format="json"),
                    uid=uid, checkpoint=path + "_cp", dead_letter=DeadLetter(path=path + "_dl"),
                    target=Target(path=path, dedup_horizon=DedupHorizon("ts", "30 minutes", 1800)))


def merge(spark, pipeline, rows):
    frame = with_uid(staged(spark, rows), pipeline.uid)
    summary = summarize(frame, pipeline)
    batch = target_rows(one_per_uid(frame, "insert_only", None))
    create_table(spark, pipeline.target, batch)
    merge_batch(spark, batch, pipeline, summary.bounds)
    return summary


def test_a_retry_in_the_fall_back_hour_is_not_inserted_twice(spark, tmp_path):
    # 2026-10-25 01:10 UTC is 02:10 CET, the second 02:10 of that night in Berlin
    second_0210 = datetime(2026, 10, 25, 1, 10, tzinfo=timezone.utc)
    pipeline = pipeline_for(str(tmp_path / "orders"))
    with session_zone(spark, "Europe/Berlin"):
        merge(spark, pipeline, [("t", 0, 0, "o1", second_0210)])
        summary = merge(spark, pipeline, [("t", 0, 1, "o1", second_0210)])  # the producer's retry
        rows = spark.read.format("delta").load(pipeline.target.path).count()
    assert rows == 1, f"the retry was inserted again; bounds {summary.bounds}"


def test_bounds_are_the_batch_range_widened_by_within_in_utc(spark):
    pipeline = pipeline_for("/unused")
    early = datetime(2026, 10, 25, 0, 50, tzinfo=timezone.utc)
    late = datetime(2026, 10, 25, 1, 10, 0, 250000, tzinfo=timezone.utc)
    for zone in ("Europe/Berlin", "America/Los_Angeles", "UTC"):
        with session_zone(spark, zone):
            frame = with_uid(staged(spark, [("t", 0, 0, "a", late), ("t", 1, 0, "b", early)]), pipeline.uid)
            bounds = summarize(frame, pipeline).bounds
        assert (bounds["horizon_lo"], bounds["horizon_hi"]) == (
            "2026-10-25 00:20:00.000000Z", "2026-10-25 01:40:00.250000Z"), zone


def fields_uids(spark, zone: str) -> list[str]:
    times = [datetime(2026, 10, 25, 1, 10, tzinfo=timezone.utc),
             datetime(2026, 11, 1, 10, 0, 0, 123400, tzinfo=timezone.utc),
             datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=timezone.utc)]
    rows = [("t", 0, i, f"o{i}", ts) for i, ts in enumerate(times)]
    with session_zone(spark, zone):
        frame = with_uid(staged(spark, rows), Uid(fields=("order_id", "ts")))
        return [r[UID] for r in frame.orderBy(f"{RAW}.offset").collect()]


def test_fields_uids_are_the_same_in_every_session_time_zone(spark):
    utc = fields_uids(spark, "UTC")
    assert fields_uids(spark, "Europe/Berlin") == utc
    assert fields_uids(spark, "America/Los_Angeles") == utc


def test_fields_uids_of_utc_sessions_are_unchanged(spark):
    """Tables written before: a UTC session hashed CAST(ts AS STRING), kept as it was."""
    expected = ["2026-10-25 01:10:00", "2026-11-01 10:00:00.1234", "1969-12-31 23:59:59.5"]
    import hashlib
    hashes = [hashlib.sha256(f"o{i}{FIELD_SEPARATOR}{text}".encode()).hexdigest()
              for i, text in enumerate(expected)]
    assert fields_uids(spark, "Asia/Kolkata") == hashes
