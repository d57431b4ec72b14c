"""`verify` on a compacted topic (issue 13.4): offsets the log cleaner removed are not
"unaccounted", a row whose record the cleaner removed is not held against the table,
and a real loss is still found. Compaction really runs: segments that roll after
100 ms, a dirty ratio near 0, no compaction lag, the broker's cleaner looking every
second."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from delta.tables import DeltaTable

from ingest.audit.verify import verify
from ingest.kafka.local_broker import create_topic
from tests.integration.conftest import run_once
from tests.integration.processes import wait_for

COMPACTED = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
             "min.compaction.lag.ms": "0"}


def produce(kafka, topic, records) -> None:
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for key, uid, amount in records:
        body = f'{{"order_id": "{key}", "customer": "c", "amount": {amount}, "ts": "2026-11-01T10:00:00"}}'
        producer.produce(topic, body.encode(), key=key.encode(), partition=0,
                         headers=[("message-id", uid.encode())])
    assert producer.flush(30) == 0


def surviving_offsets(kafka, topic) -> list[int]:
    """The offsets partition 0 holds now, read up to its end (assigned, no group to join)."""
    consumer = Consumer({**kafka.client_config(), "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                offsets.append(message.offset())
        assert offsets and offsets[-1] == end - 1, (offsets, end)
        return offsets
    finally:
        consumer.close()


def test_verify_on_a_compacted_topic(spark, kafka, pipeline):
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.client_config(), topic, partitions=1, settings=COMPACTED)
    pipeline = replace(pipeline, source=replace(pipeline.source, kafka=replace(
        pipeline.source.kafka, topics=(topic,))))
    # offset 3 is a producer retry of u-1 (same key, same uid): the cleaner keeps it, not offset 1,
    # which lies above the partition's first offset (k9's, kept): only compaction explains the gap
    produce(kafka, topic, [("k9", "u-9", 1), ("k1", "u-1", 1), ("k0", "u-2", 2), ("k1", "u-1", 1),
                           ("k0", "u-4", 3)])
    run_once(spark, pipeline, timeout=1200)  # every version ingested before the cleaner ran
    time.sleep(1)  # past segment.ms (100 ms): the next record rolls the segment, a clock and no event
    produce(kafka, topic, [("k2", "u-5", 1)])  # rolls the segment: the first one is cleanable
    survivors = wait_for(lambda: (found := surviving_offsets(kafka, topic)) != list(range(6)) and found,
                         240, "the log cleaner to compact the topic", poll=3)
    assert survivors == [0, 3, 4, 5], survivors  # k9's u-9, k1's retry of u-1, k0's u-4, k2's u-5
    run_once(spark, pipeline, timeout=1200)

    report = verify(spark, pipeline)
    assert report.ok, report
    # u-1's row sits at offset 1, which the cleaner removed: no finding
    assert (report.topic_records, report.unaccounted, report.target_rows, report.findings) == (4, 0, 5, ())

    DeltaTable.forPath(spark, pipeline.target.path).delete("_uid = 'u-4'")  # a real loss
    lost = verify(spark, pipeline)
    assert not lost.ok and (lost.missing, lost.unaccounted) == (1, 1)
    assert lost.missing_examples[0].uid == "u-4"
