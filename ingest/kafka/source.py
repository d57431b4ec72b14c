"""Kafka options from the spec -> a streaming DataFrame of raw records."""

from __future__ import annotations

import json
from typing import Mapping

from ingest.spec.model import KafkaSource, Pipeline


def kafka_options(kafka: KafkaSource, starting_offsets: Mapping | str | None = None) -> dict[str, str]:
    """Options for Spark's Kafka source; `starting_offsets` overrides the spec's (a recovery)."""
    options = {f"kafka.{key}": str(value) for key, value in kafka.options.items()}
    options.update({
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.isolation.level": kafka.isolation_level,
        "startingOffsets": _offsets_option(starting_offsets or kafka.starting_offsets),
        "failOnDataLoss": str(not kafka.allow_data_loss).lower(),
        "includeHeaders": "true",
    })
    if kafka.pattern:
        options["subscribePattern"] = kafka.pattern
    else:
        options["subscribe"] = ",".join(kafka.topics)
    if kafka.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(kafka.max_offsets_per_trigger)
    return options


def _offsets_option(offsets: Mapping | str) -> str:
    if isinstance(offsets, str):
        return offsets
    return json.dumps({topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()})


def read_stream(spark, pipeline: Pipeline, starting_offsets: Mapping | None = None):
    """Raw records: key, value, topic, partition, offset, timestamp, headers."""
    reader = spark.readStream.format("kafka")
    for key, value in kafka_options(pipeline.source.kafka, starting_offsets).items():
        reader = reader.option(key, value)
    return reader.load()
