"""`on_data_loss: record`: each range lost to Kafka's retention becomes one row of
the dead-letter table (stage `lost`), so every offset is accounted for somewhere.

The row sits at the first lost offset; its reason names the whole range and when
the loss was found. It is written under its own idempotent transaction id (one
app id per partition, version = the first lost offset), so finding the same
gap again after a crash or a lost checkpoint adds nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ingest.batch import dead_letter
from ingest.batch.ledger import Txn
from ingest.run.recovery import Gap
from ingest.spec import template
from ingest.spec.model import Pipeline

LOST = "lost"
ROW = ("_topic STRING, _partition INT, _offset BIGINT, _kafka_timestamp TIMESTAMP, key BINARY, "
       "value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, stage STRING, reason STRING, "
       "pipeline STRING, batch_id BIGINT, _ingested_at TIMESTAMP")


def lost_txn(pipeline: str, gap: Gap) -> Txn:
    app_id = f"ingest-{pipeline}-lost-{gap.topic}-{gap.partition}"
    metadata = {"ingest": 1, "pipeline": pipeline, "app_id": app_id,
                "lost": {"topic": gap.topic, "partition": gap.partition,
                         "first": gap.resume_at, "last": gap.earliest - 1}}
    return Txn(app_id, gap.resume_at, json.dumps(metadata, separators=(",", ":")))


def reason(gap: Gap, found: datetime) -> str:
    return (f"offsets {gap.resume_at}-{gap.earliest - 1} ({gap.earliest - gap.resume_at} records) "
            f"were deleted by Kafka retention before they were read; found {found.isoformat(timespec='seconds')}")


def record_lost(spark, pipeline: Pipeline, gaps: list[Gap]) -> None:
    found = datetime.now(timezone.utc)
    for gap in gaps:
        row = (gap.topic, gap.partition, gap.resume_at, None, None, None, None, LOST, reason(gap, found),
               pipeline.name, None, found.replace(tzinfo=None))
        table = template.for_topic(pipeline, gap.topic).dead_letter if template.is_per_topic(pipeline) \
            else pipeline.dead_letter
        dead_letter.write(spark.createDataFrame([row], ROW), table, lost_txn(pipeline.name, gap))
