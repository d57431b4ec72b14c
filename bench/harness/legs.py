"""The throughput legs, each over the same topic, and the audit of what they wrote.

raw_consume     confluent-kafka's batched `consume`: the source-side limit
spark_noop      Spark's Kafka source into the no-op sink
plain_append    decode and append to Delta: the at-least-once baseline users would write
spark_dedup     the same with Spark's own streaming dedup (dropDuplicatesWithinWatermark on the
                uid, watermark on the event time `ts`): the exactly-once a Spark user builds by hand
ingest          `ingest`'s query (start_query, as `ingest run --once` runs it), bounded MERGE
ingest_naive    the same with INGEST_MERGE_BOUNDS=off: MERGE on `t._uid = s._uid` alone

Every Spark leg reads with the same Kafka options (read_committed, the same
max_offsets_per_trigger) under the available-now trigger, and writes the same
columns, so the batches and bytes are alike and only the work differs.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.harness.datagen import SCHEMA, UID_HEADER

THROUGHPUT_LEGS = ("raw_consume", "spark_noop", "plain_append", "spark_dedup", "ingest", "ingest_naive")
PEER_WATERMARK = "10 minutes"  # the event-time delay the Spark peer's dedup keeps state for


@dataclass
class Topic:
    name: str
    partitions: int
    records: int  # committed records, duplicates included
    unique: int
    uids_file: Path


@dataclass
class Outcome:
    records: int
    extra: dict = field(default_factory=dict)
    target: str | None = None


def bench_pipeline(bootstrap: str, topic: str, root: Path, max_offsets: int | None,
                   horizon: tuple[str, str, int] | None = None):
    """The pipeline every ingest leg runs; fresh paths under `root`."""
    from ingest.spec.model import (
        DeadLetter,
        DedupHorizon,
        KafkaSource,
        Pipeline,
        Source,
        Target,
        Uid,
    )

    dedup = DedupHorizon(*horizon) if horizon else None
    return Pipeline(
        name="bench",
        source=Source(kafka=KafkaSource(bootstrap_servers=bootstrap, topics=(topic,),
                                        max_offsets_per_trigger=max_offsets),
                      format="json", schema=SCHEMA),
        uid=Uid(header=UID_HEADER),
        target=Target(path=str(root / "target"), dedup_horizon=dedup),
        checkpoint=str(root / "checkpoint"),
        dead_letter=DeadLetter(path=str(root / "dead_letter")),
    )


def raw_consume(bench, topic: Topic, root: Path) -> Outcome:
    consumer = Consumer({**bench.kafka.client_config(), "group.id": f"bench-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(topic.name, p, -2) for p in range(topic.partitions)])  # -2: beginning
    records, size, at_end = 0, 0, set()
    try:
        while len(at_end) < topic.partitions:
            for message in consumer.consume(10_000, 1.0):
                if message.error():
                    at_end.add(message.partition())  # partition EOF
                    continue
                records += 1
                size += len(message.value())
    finally:
        consumer.close()
    return Outcome(records, {"value_bytes": size})


def _stream(bench, topic: Topic, root: Path):
    from ingest.kafka.source import kafka_options

    pipeline = bench_pipeline(bench.kafka.bootstrap, topic.name, root, bench.max_offsets)
    reader = bench.spark.readStream.format("kafka")
    for key, value in kafka_options(pipeline.source.kafka).items():
        reader = reader.option(key, value)
    return reader.load()


def finished(query) -> list:
    """The query's progress reports once it has ended (stopped either way; its error raised)."""
    try:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
    finally:
        query.stop()
    return query.recentProgress


def _await(query) -> int:
    return sum(p["numInputRows"] for p in finished(query))


BACKGROUND_JOB_GROUP = "ingest-background"  # prefix of the product's background threads' job groups


class JobCount:
    """Spark jobs started since this was made, from the status store (spark.ui.retainedJobs
    is raised in the bench's session so none is forgotten), split by job group: a job whose
    group starts with BACKGROUND_JOB_GROUP runs on ingest's background thread (warming the next
    snapshot, writing a Delta checkpoint) beside the batches; every other job is one a batch
    waits for, its critical path."""

    def __init__(self, spark):
        self.context = spark.sparkContext._jsc.sc()
        self.store = self.context.statusStore()
        self.first = self._next_job_id()

    def _next_job_id(self) -> int:
        jobs = self.store.jobsList(None)  # newest first
        return jobs.head().jobId() + 1 if jobs.size() else 0

    def since(self) -> tuple[int, int]:
        """(critical, background): the jobs started since this was made."""
        self.context.listenerBus().waitUntilEmpty()  # the last jobs' start events are in the store
        critical = background = 0
        jobs = self.store.jobsList(None).iterator()
        while jobs.hasNext():
            job = jobs.next()
            if job.jobId() < self.first:
                break
            group = job.jobGroup()
            if group.isDefined() and group.get().startswith(BACKGROUND_JOB_GROUP):
                background += 1
            else:
                critical += 1
        return critical, background


def batch_figures(query, jobs: tuple[int, int]) -> dict:
    """Per batch with records: the trigger's whole time (ms); the critical and background jobs
    (`JobCount.since`), each per batch."""
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    millis = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    critical, background = jobs

    def per_batch(count: int):
        return round(count / len(batches), 2) if batches else None

    return {"batches": len(batches), "batch_ms": millis, "jobs": critical, "background_jobs": background,
            "jobs_per_batch": per_batch(critical), "background_jobs_per_batch": per_batch(background)}


def spark_noop(bench, topic: Topic, root: Path) -> Outcome:
    query = (_stream(bench, topic, root).writeStream.format("noop")
             .option("checkpointLocation", str(root / "checkpoint"))
             .trigger(availableNow=True).start())
    return Outcome(_await(query))


def decoded(bench, topic: Topic, root: Path):
    from pyspark.sql import functions as F

    raw = _stream(bench, topic, root)
    uid = F.filter("headers", lambda h: h["key"] == F.lit(UID_HEADER))[0]["value"].cast("string")
    parsed = raw.select(uid.alias("_uid"), F.from_json(F.col("value").cast("string"), SCHEMA).alias("p"),
                        "topic", "partition", "offset", "timestamp")
    rows = parsed.select("_uid", "p.*", F.col("topic").alias("_topic"),
                         F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
                         F.col("timestamp").alias("_kafka_timestamp"),
                         F.current_timestamp().alias("_ingested_at"))
    return rows


def append_query(bench, rows, root: Path, processing_time: str | None = None):
    """The query appending `rows` to a Delta table under `root`, and the table's path."""
    target = str(root / "target")
    writer = rows.writeStream.format("delta").option("checkpointLocation", str(root / "checkpoint"))
    writer = writer.trigger(processingTime=processing_time) if processing_time else writer.trigger(availableNow=True)
    return writer.start(target), target


def _append(bench, rows, root: Path) -> Outcome:
    jobs = JobCount(bench.spark)
    query, target = append_query(bench, rows, root)
    records = _await(query)
    return Outcome(records, batch_figures(query, jobs.since()), target=target)


def plain_append(bench, topic: Topic, root: Path) -> Outcome:
    """What a user writes without exactly-once: decode, add the uid and coordinates, append."""
    return _append(bench, decoded(bench, topic, root), root)


def spark_dedup(bench, topic: Topic, root: Path) -> Outcome:
    """The Spark peer: streaming dedup on the uid within an event-time watermark, then append.
    A copy that comes after the watermark passed is dropped or let through, not checked."""
    rows = (decoded(bench, topic, root).withWatermark("ts", PEER_WATERMARK)
            .dropDuplicatesWithinWatermark(["_uid"]))
    return _append(bench, rows, root)


@contextmanager
def merge_bounds(on: bool):
    saved = os.environ.get("INGEST_MERGE_BOUNDS")
    os.environ["INGEST_MERGE_BOUNDS"] = "on" if on else "off"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("INGEST_MERGE_BOUNDS", None)
        else:
            os.environ["INGEST_MERGE_BOUNDS"] = saved


def run_ingest(spark, pipeline, bounded: bool = True, figures: dict | None = None) -> list:
    """`ingest run --once` in this process: the query, until it has processed what is there.
    `figures`, if given, receives the per-batch times and jobs (`batch_figures`)."""
    from ingest.stream.query import start_query

    reports = []
    jobs = JobCount(spark)
    with merge_bounds(bounded):
        query, _ = start_query(spark, pipeline, once=True, on_report=reports.append)
    _await(query)
    if figures is not None:
        figures.update(batch_figures(query, jobs.since()))
    return reports


def ingest_leg(bounded: bool):
    def leg(bench, topic: Topic, root: Path) -> Outcome:
        pipeline = bench_pipeline(bench.kafka.bootstrap, topic.name, root, bench.max_offsets)
        figures = {}
        reports = run_ingest(bench.spark, pipeline, bounded, figures)
        batch_seconds = [round(r.seconds, 2) for r in reports]
        return Outcome(sum(r.summary.read for r in reports),
                       {**figures, "batch_seconds": batch_seconds,
                        "dead_letters": sum(r.summary.dead_letters for r in reports)},
                       target=pipeline.target.path)
    return leg


LEG_FUNCTIONS = {
    "raw_consume": raw_consume,
    "spark_noop": spark_noop,
    "plain_append": plain_append,
    "spark_dedup": spark_dedup,
    "ingest": ingest_leg(bounded=True),
    "ingest_naive": ingest_leg(bounded=False),
}


def audit(spark, target: str, uids_file: Path) -> dict:
    """Duplicate, missing and unexpected uids of a target against the committed uids."""
    expected = spark.read.text(str(uids_file)).withColumnRenamed("value", "_uid")
    got = spark.read.format("delta").load(target).select("_uid")
    return {
        "rows": got.count(),
        "duplicate_uids": got.groupBy("_uid").count().where("count > 1").count(),
        "missing_uids": expected.join(got, "_uid", "left_anti").count(),
        "unexpected_uids": got.join(expected, "_uid", "left_anti").count(),
    }


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path

