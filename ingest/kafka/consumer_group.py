"""Mirror a pipeline's committed offsets into a Kafka consumer group.

Spark commits nothing to Kafka, so the lag tools every Kafka team runs
(`kafka-consumer-groups`, Burrow, Datadog, kafka-lag-exporter) see nothing.
After each Delta commit the batch's end offsets are committed to the group the
pipeline names. The group is written, never read: the Delta log stays the
truth, and a group reset or deleted by hand changes nothing for the run.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, TopicPartition

from ingest.kafka.admin import client_config
from ingest.kafka.offsets import Offsets
from ingest.spec.model import KafkaSource

_QUIET = logging.getLogger("ingest.kafka.consumer_group.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class GroupMirror:
    """One client per pipeline; it never joins the group (no subscription), it only commits."""

    def __init__(self, kafka: KafkaSource, group: str):
        self.group = group
        self._consumer = Consumer({**client_config(kafka), "group.id": group,
                                   "enable.auto.commit": False, "logger": _QUIET})

    def commit(self, offsets: Offsets) -> None:
        """Commit `offsets` (topic -> partition -> next offset to read); waits for the broker."""
        positions = [TopicPartition(t, p, o) for t, parts in sorted(offsets.items())
                     for p, o in sorted(parts.items())]
        if positions:
            self._consumer.commit(offsets=positions, asynchronous=False)

    def close(self) -> None:
        self._consumer.close()
