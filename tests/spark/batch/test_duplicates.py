"""The batch's one row per uid (`processor.mark_kept`, `uid.mark_one_per_uid`), the rule every
change to the dedup must keep (issue 53): insert_only the first Kafka position, upsert the latest
`order_by`, then the later Kafka timestamp, then the later position; across and within
partitions and topics, ties in each, a null timestamp, failed records beside good ones, and the
counts and bounds the summary gives the ledger and the MERGE."""

from datetime import datetime, timezone

import pytest
from pyspark.sql import functions as F

from ingest.batch.processor import mark_kept, summarize
from ingest.batch.staged import KEEP, RAW, REASON, STAGE
from ingest.batch.uid import with_uid
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


def at(minute: int | None) -> datetime | None:
    return None if minute is None else datetime(2026, 11, 1, 10, minute, tzinfo=timezone.utc)


# (topic, partition, offset, kafka minute, customer, version, name); name says which one each rule keeps
ROWS = [
    ("a", 0, 10, 5, "c1", 3, "c1 first position; upsert: loses to the version 4"),
    ("a", 1, 3, 6, "c1", 4, "c1 upsert winner (latest version)"),
    ("a", 0, 11, 7, "c1", 2, "c1 later, older version"),
    ("a", 0, 20, 1, "c2", 5, "c2 insert_only winner (first position in its partition)"),
    ("a", 0, 21, 9, "c2", 5, "c2 upsert winner: version tie, later Kafka timestamp"),
    ("a", 1, 0, 8, "c2", 5, "c2 tie, earlier timestamp"),
    ("a", 0, 30, 4, "c3", 7, "c3 upsert loser: same version and timestamp, lower position"),
    ("a", 1, 30, 4, "c3", 7, "c3 upsert winner: full tie, the later position (partition 1)"),
    ("b", 0, 1, 4, "c3", 7, "c3 topic b: full tie, topic b > a: the upsert winner"),
    ("a", 0, 5, None, "c4", 1, "c4 null Kafka timestamp"),
    ("a", 0, 6, 2, "c4", 1, "c4 upsert winner: a timestamp beats none"),
    ("a", 0, 40, 3, "c5", 1, "c5 alone"),
    ("a", 0, 41, 3, "c6", None, "c6 null version: upsert dead letter"),
    ("a", 0, 42, 3, "c6", 2, "c6 the good one"),
    ("a", 1, 50, 3, None, 1, "no uid: dead letter"),
]
INSERT_ONLY_KEPT = {"c1": "c1 first position; upsert: loses to the version 4",
                    "c2": "c2 insert_only winner (first position in its partition)",
                    "c3": "c3 upsert loser: same version and timestamp, lower position",
                    "c4": "c4 null Kafka timestamp", "c5": "c5 alone",
                    "c6": "c6 null version: upsert dead letter"}
UPSERT_KEPT = {"c1": "c1 upsert winner (latest version)",
               "c2": "c2 upsert winner: version tie, later Kafka timestamp",
               "c3": "c3 topic b: full tie, topic b > a: the upsert winner",
               "c4": "c4 upsert winner: a timestamp beats none", "c5": "c5 alone", "c6": "c6 the good one"}


def pipeline_for(mode: str) -> Pipeline:
    return Pipeline(name="customers", source=Source(KafkaSource("unused:9092", ("a", "b")), format="json"),
                    uid=Uid(field="customer"), checkpoint="/unused_cp", dead_letter=DeadLetter(path="/unused_dl"),
                    target=Target(path="/unused", mode=mode, order_by="version" if mode == "upsert" else None))


def staged(spark, mode: str):
    frame = spark.createDataFrame(
        [((topic, partition, offset, at(minute)), customer, version, name)
         for topic, partition, offset, minute, customer, version, name in ROWS],
        f"{RAW} STRUCT<topic: STRING, partition: INT, offset: LONG, timestamp: TIMESTAMP>, "
        "customer STRING, version LONG, name STRING").repartition(3)
    frame = frame.select(F.lit(None).cast("string").alias(STAGE), F.lit(None).cast("string").alias(REASON), "*")
    return with_uid(frame, Uid(field="customer"), "version" if mode == "upsert" else None)


def kept_names(frame) -> dict:
    return {r.customer: r.name for r in frame.where(F.col(KEEP)).collect()}


@pytest.mark.parametrize("mode, expected", [("insert_only", INSERT_ONLY_KEPT), ("upsert", UPSERT_KEPT)])
def test_one_row_per_uid_is_the_one_the_rule_names(spark, mode, expected):
    pipeline, frame = pipeline_for(mode), staged(spark, mode)
    assert kept_names(mark_kept(frame, pipeline)) == expected
    summary = summarize(frame, pipeline)
    assert summary.unique == len(expected)
    assert summary.bounds == {"uid_min": "c1", "uid_max": "c6"}
    failed = {"insert_only": 1, "upsert": 2}[mode]  # no uid; upsert also the null version
    assert summary.by_stage["uid"] == failed and summary.read == len(ROWS)
