"""A steady batch reuses the Java code Spark compiled for the batches before it.

Spark compiles each plan's code once and keeps the class in a cache of 100 by default, kept in 4
segments of 25, each evicting on its own. One of ingest's batches uses 60 to 90 classes, so a
batch of one pipeline alone could already overflow a segment, and two pipelines in one job
(or a table per topic) always did: then every batch compiled its classes again, and the JIT
compiled them again too (docs/performance.md). The session ingest builds keeps 500
(`builder.LOCAL_DEFAULTS`); the suite's session is one of those. The suite runs plans
interpreted, so this test turns code generation back on while it runs.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest

from ingest.batch.processor import BatchProcessor, payload_schema
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

KAFKA_SCHEMA = ("topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, key BINARY, value BINARY, "
                "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
COMPILED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
RECORDS = 200
FIELDS = {  # two pipelines of one job, each its own columns and so its own code
    "events": ("event_id", "user_id", "session_id", "event_type", "page", "referrer", "country", "device"),
    "orders": ("order_id", "customer", "status", "channel", "currency"),
}


@pytest.fixture
def compiled_session(spark):
    """The suite's session with code generation on, Delta's own queries included (a clone's
    settings would not reach the table state Delta computes on the session it cached)."""
    before = {key: spark.conf.get(key) for key in COMPILED}
    for key, value in COMPILED.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def schema(topic: str) -> str:
    return ", ".join(f"{name} STRING" for name in FIELDS[topic]) + ", amount DOUBLE, ts TIMESTAMP"


def batch(spark, topic: str, number: int):
    rows = []
    for i in range(RECORDS):
        offset = number * RECORDS + i
        uid = f"{topic}-{offset:08d}"
        record = {**{name: f"{name}-{i % 7}" for name in FIELDS[topic]}, "amount": float(i),
                  "ts": "2026-12-02T12:00:00.000Z"}
        rows.append((topic, i % 2, offset, datetime(2026, 12, 2, 12, 0, i % 60), None,
                     bytearray(json.dumps(record).encode()), [("message-id", bytearray(uid.encode()))]))
    frame = spark.createDataFrame(rows, KAFKA_SCHEMA).repartition(2, "partition").cache()
    frame.count()  # the batch's rows at hand, as Kafka's would be
    return frame


def processor_for(spark, root, topic: str) -> BatchProcessor:
    checkpoint = root / topic / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    pipeline = Pipeline(
        name=topic, source=Source(kafka=KafkaSource("unused:9092", (topic,)), format="json", schema=schema(topic)),
        uid=Uid(header="message-id"), target=Target(path=str(root / topic / "target")),
        checkpoint=str(checkpoint), dead_letter=DeadLetter(path=str(root / topic / "dead")))
    made = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=lambda report: None)
    made.position.topic_ids = {topic: f"{topic}-id"}  # no broker: the topic id is not what is tested
    return made


def compilations(spark) -> int:
    return spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


def test_steady_batches_compile_almost_no_code_again(compiled_session, tmp_path):
    spark = compiled_session
    processors = {topic: processor_for(spark, tmp_path, topic) for topic in FIELDS}
    compiled = []
    for number in range(4):
        frames = {topic: batch(spark, topic, number) for topic in FIELDS}
        before = compilations(spark)
        for topic, processor in processors.items():
            processor(frames[topic], number)
            processor.settle()
        compiled.append(compilations(spark) - before)
        for frame in frames.values():
            frame.unpersist()

    assert compiled[0] > 60, compiled  # compiled, not interpreted: the first batches compile their plans
    # A steady batch compiles only what differs from the batch before: the write's code, which
    # holds the batch's `_ingested_at` as a literal. With Spark's default cache: 34 a round.
    assert max(compiled[2:]) <= 10, compiled
    for processor in processors.values():
        assert spark.read.format("delta").load(processor.pipeline.target.path).count() == 4 * RECORDS
