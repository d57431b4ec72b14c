"""`on_data_loss: record`: each range lost to Kafka's retention becomes one row of
the dead-letter table (stage `lost`), so every offset is accounted for somewhere.

A range is found either when a run starts (the offsets to resume from are gone:
`ingest.stream.recovery`) or inside a batch, when retention deleted records the
running query had planned but not yet read (Spark then skips to the earliest
offset left): `skipped_ranges` compares the batch's planned start with what it
read and asks the broker only where they differ.

The row sits at the first lost offset; its reason names the whole range and when
the loss was found. It is written under its own idempotent transaction id (one
app id per partition of a topic id, version = the range's end), so finding the
same gap again after a crash or a lost checkpoint adds nothing, and finding it
again grown (retention went on deleting before it was read) widens the row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial

from ingest.batch.commit.conflicts import retry_conflicts
from ingest.batch.commit.ledger import Txn
from ingest.batch.merge import dead_letters
from ingest.kafka import admin as kafka_admin
from ingest.spec import template
from ingest.spec.model import Pipeline

LOST = "lost"


@dataclass(frozen=True)
class Gap:
    """Offsets resume_at .. earliest-1 of a partition, deleted before they were read."""

    topic: str
    partition: int
    resume_at: int
    earliest: int

    def describe(self) -> str:
        return (f"{self.topic}/{self.partition}: offsets {self.resume_at}-{self.earliest - 1} "
                f"({self.earliest - self.resume_at} records) were deleted by retention")

ROW = ("_topic STRING, _partition INT, _offset BIGINT, _kafka_timestamp TIMESTAMP, key BINARY, "
       "value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, stage STRING, reason STRING, "
       "pipeline STRING, batch_id BIGINT, _ingested_at TIMESTAMP, _topic_id STRING")


def lost_txn(pipeline: str, gap: Gap, topic_id: str | None = None) -> Txn:
    """The topic id keeps a recreated topic's ranges (offsets from 0 again) apart from the
    old one's; the version is the range's end, so a range found again further along is
    written (and widens the row) where the same range again is skipped."""
    app_id = f"ingest-{pipeline}-lost-{gap.topic}-{gap.partition}" + (f"@{topic_id}" if topic_id else "")
    metadata = {"ingest": 1, "pipeline": pipeline, "app_id": app_id,
                "lost": {"topic": gap.topic, "partition": gap.partition,
                         "first": gap.resume_at, "last": gap.earliest - 1}}
    return Txn(app_id, gap.earliest, json.dumps(metadata, separators=(",", ":")))


def reason(gap: Gap, found: datetime) -> str:
    return (f"offsets {gap.resume_at}-{gap.earliest - 1} ({gap.earliest - gap.resume_at} records) "
            f"were deleted by Kafka retention before they were read; found {found.isoformat(timespec='seconds')}")


def record_lost(spark, pipeline: Pipeline, gaps: list[Gap]) -> None:
    if not gaps:
        return
    found = datetime.now(timezone.utc)
    ids = kafka_admin.topic_ids(pipeline.source.kafka, {gap.topic for gap in gaps})
    for gap in gaps:
        row = (gap.topic, gap.partition, gap.resume_at, None, None, None, None, LOST, reason(gap, found),
               pipeline.name, None, found.replace(tzinfo=None), ids.get(gap.topic))
        table = template.for_topic(pipeline, gap.topic).dead_letter if template.is_per_topic(pipeline) \
            else pipeline.dead_letter
        frame, txn = spark.createDataFrame([row], ROW), lost_txn(pipeline.name, gap, ids.get(gap.topic))
        # an OPTIMIZE of the dead letters beside it (optimize_every) must not fail the batch
        retry_conflicts(partial(dead_letters.write, frame, table, txn, widen_lost=True),
                        f"{pipeline.name}: lost range {gap.describe()} to {table.location}")


def skipped_ranges(pipeline: Pipeline, planned_start: dict, planned_end: dict, first_read: dict) -> list[Gap]:
    """Ranges of this batch that retention deleted before Spark read them. A partition whose
    first record read is its planned start (the usual case) costs nothing; only where the
    batch read later than planned, or nothing at all, is the broker's earliest offset asked
    (a transaction marker or a compacted record leaves such a hole too, and is no loss)."""
    ends = {(t, p): end for t, parts in planned_end.items() for p, end in parts.items()}
    suspects = {(topic, partition): start
                for topic, parts in planned_start.items() for partition, start in parts.items()
                if (topic, partition) in ends and 0 <= start
                < first_read.get(topic, {}).get(partition, ends[topic, partition])}
    if not suspects:
        return []
    marks = kafka_admin.watermarks(pipeline.source.kafka)
    gaps = []
    for (topic, partition), start in sorted(suspects.items()):
        earliest = marks.get(topic, {}).get(partition, (None, None))[0]
        if earliest is not None and earliest > start:
            # Retention may have gone on since the batch read: what it read is not lost.
            read = first_read.get(topic, {}).get(partition, ends[topic, partition])
            gaps.append(Gap(topic, partition, start, min(earliest, read, ends[topic, partition])))
    return gaps
