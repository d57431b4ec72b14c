"""`ingest replay`: reprocess a range of the topic into the same target.

A replay is a batch read of a fixed offset range (no streaming query), cut in
chunks of `max_offsets_per_trigger`, each chunk run through the pipeline's own
`BatchProcessor`: the same decode, transform, uid, dead letters and MERGE. It
has its own checkpoint, `<checkpoint>_replay/<replay id>`, so the pipeline's
checkpoint is never touched (a replay can run next to the running pipeline),
and its own transaction id scheme: the replay id (a hash of the pipeline and
the range) plays the part of the query id, the chunk number the batch id. Run
again, a replay skips the chunks its checkpoint says are done, and Delta skips
a chunk committed just before a crash. By uid it is idempotent anyway: in
insert_only a uid already in the target is a no-op; upsert applies the usual
rule (a later `order_by` wins, the same record again changes nothing).

The range ends at the offsets the pipeline has committed (its Delta log): a
replay reprocesses, it never runs ahead of the pipeline. Records already in the
dead-letter table are not replayed: they are accounted for there (a second
dead-letter row for one offset is what `verify` flags as a copy).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Callable

from pyspark.sql import functions as F

from ingest.batch.commit import ledger
from ingest.batch.processor import BatchProcessor, BatchReport, payload_schema
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.kafka.offsets import Offsets
from ingest.kafka.source import kafka_options
from ingest.platform.delta import table_exists
from ingest.spec import template
from ingest.spec.locations import shown_location
from ingest.spec.model import Pipeline, Target

DEFAULT_CHUNK = 100_000


class ReplayError(IngestError):
    """The range asked for cannot be replayed (nothing ingested there yet, bad offsets)."""


@dataclass(frozen=True)
class ReplayRange:
    start: Offsets  # first offset to read, per partition
    end: Offsets  # first offset not to read

    @property
    def records(self) -> int:
        return sum(max(0, self.end[t][p] - o) for t, parts in self.start.items() for p, o in parts.items())

    def describe(self) -> str:
        return " ".join(f"{t}/{p}:{o}-{self.end[t][p]}" for t, parts in sorted(self.start.items())
                        for p, o in sorted(parts.items()) if self.end[t][p] > o) or "nothing"


def resolve_range(spark, pipeline: Pipeline, from_ms: int | None = None, to_ms: int | None = None,
                  from_offsets: Offsets | None = None) -> ReplayRange:
    """Timestamps or offsets to a range, clipped to what Kafka still has and the pipeline committed."""
    if template.is_per_topic(pipeline):
        raise ReplayError(f"{pipeline.name}: replay of a per-topic target ({template.TOPIC}) is not supported yet")
    kafka = pipeline.source.kafka
    marks = kafka_admin.watermarks(kafka)
    committed = _committed(spark, pipeline)
    if not committed:
        raise ReplayError(f"{pipeline.name}: nothing ingested into {shown_location(pipeline.target.location)} yet; "
                          "a replay reprocesses what a run has committed")
    parts = {t: sorted(p) for t, p in marks.items()}
    if from_offsets is not None:
        unknown = [f"{t}/{p}" for t, ps in from_offsets.items() for p in ps if p not in marks.get(t, {})]
        if unknown:
            raise ReplayError(f"--from-offsets: no such partition {', '.join(unknown)}")
        start = {t: {p: from_offsets.get(t, {}).get(p, marks[t][p][1]) for p in ps} for t, ps in parts.items()}
    else:
        start = kafka_admin.offsets_for_time(kafka, parts, from_ms)
    until = kafka_admin.offsets_for_time(kafka, parts, to_ms) if to_ms is not None else {}
    begin: dict = {}
    end: dict = {}
    for topic, ps in parts.items():
        for p in ps:
            low, high = marks[topic][p]
            stop = min(_or(until.get(topic, {}).get(p), high), committed.get(topic, {}).get(p, low))
            begin.setdefault(topic, {})[p] = max(low, _or(start.get(topic, {}).get(p), high))
            end.setdefault(topic, {})[p] = max(begin[topic][p], stop)
    return ReplayRange(begin, end)


def _or(offset: int | None, instead: int) -> int:
    return instead if offset is None or offset < 0 else offset


def _committed(spark, pipeline: Pipeline) -> Offsets:
    """The target's ledger alone: every batch ends in a target commit, so the dead letters'
    ledger is ahead of it only when a batch stopped between its two commits, and the
    pipeline itself will read that batch again."""
    if not table_exists(spark, pipeline.target):
        return {}
    target = pipeline.target
    return ledger.recorded_offsets(
        ledger.history_entries(spark, target.location, bool(target.table), pipeline.name))


def replay_id(pipeline: Pipeline, span: ReplayRange) -> str:
    text = json.dumps([pipeline.name, span.start, span.end], sort_keys=True, default=str)
    return "replay-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def replay(spark, pipeline: Pipeline, span: ReplayRange,
           on_report: Callable[[BatchReport], None] = lambda report: None) -> list[BatchReport]:
    """Run the range through the batch path, chunk by chunk; returns the chunks' reports."""
    ident = replay_id(pipeline, span)
    checkpoint = f"{pipeline.checkpoint.rstrip('/')}_replay/{ident}"
    replaying = replace(pipeline, checkpoint=checkpoint)
    done = _Checkpoint(spark, checkpoint, ident)
    processor = BatchProcessor(replaying, payload_schema(spark, pipeline))
    reports: list[BatchReport] = []

    def reported(report: BatchReport) -> None:
        reports.append(report)
        on_report(report)

    processor.on_report = reported
    dead = _dead_letter_offsets(spark, pipeline)
    for number, (start, end) in enumerate(chunks(span, pipeline.source.kafka.max_offsets_per_trigger
                                                 or DEFAULT_CHUNK)):
        if number in done.chunks:
            continue
        records = _read(spark, pipeline, start, end)
        if dead is not None:
            records = records.join(dead, ["topic", "partition", "offset"], "left_anti").select(*records.columns)
        try:
            processor(records, number)
        except BaseException:
            processor.settle()  # the work beside the batches ends before the error is told
            raise
        done.mark(number)
    processor.settle()  # as `ingest run` does once its query ends: nothing left running behind the return
    return reports


def chunks(span: ReplayRange, size: int) -> list[tuple[Offsets, Offsets]]:
    """At most `size` offsets per partition per chunk."""
    out, position = [], {t: dict(p) for t, p in span.start.items()}
    while any(position[t][p] < span.end[t][p] for t in position for p in position[t]):
        start = {t: dict(p) for t, p in position.items()}
        for t, parts in position.items():
            for p in parts:
                parts[p] = min(span.end[t][p], parts[p] + size)
        out.append((start, {t: dict(p) for t, p in position.items()}))
    return out


def _read(spark, pipeline: Pipeline, start: Offsets, end: Offsets):
    options = kafka_options(pipeline.source.kafka, start)
    options.pop("maxOffsetsPerTrigger", None)  # a streaming option
    options["endingOffsets"] = json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in end.items()})
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _dead_letter_offsets(spark, pipeline: Pipeline):
    table = Target(path=pipeline.dead_letter.path, table=pipeline.dead_letter.table)
    if not table_exists(spark, table):
        return None
    rows = spark.read.table(table.table) if table.table else spark.read.format("delta").load(table.path)
    own = rows.where(F.col("pipeline") == pipeline.name)  # a dead-letter table may serve several
    return own.select(F.col("_topic").alias("topic"), F.col("_partition").alias("partition"),
                       F.col("_offset").alias("offset")).distinct()


class _Checkpoint:
    """The replay's own folder: `metadata` (its id, read by the batch path as the query id)
    and `chunks/<n>` for every chunk done."""

    def __init__(self, spark, folder: str, ident: str):
        if getattr(spark, "_jvm", None) is None:
            from ingest.platform.connect import refuse

            raise refuse("ingest replay (its progress is kept through Hadoop's FileSystem)")
        self.fs_path = spark._jvm.org.apache.hadoop.fs.Path
        self.fs = self.fs_path(folder).getFileSystem(spark._jsc.hadoopConfiguration())
        self.folder = folder
        metadata = self.fs_path(f"{folder}/metadata")
        if not self.fs.exists(metadata):
            self._write(metadata, json.dumps({"id": ident}))
        listing = self.fs.listStatus(self.fs_path(f"{folder}/chunks")) if self.fs.exists(
            self.fs_path(f"{folder}/chunks")) else []
        self.chunks = {int(s.getPath().getName()) for s in listing if s.getPath().getName().isdigit()}

    def mark(self, number: int) -> None:
        self._write(self.fs_path(f"{self.folder}/chunks/{number}"), "done")
        self.chunks.add(number)

    def _write(self, path, text: str) -> None:
        out = self.fs.create(path, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
