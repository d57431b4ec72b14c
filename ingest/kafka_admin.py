"""Read-only questions to the broker, outside Spark: is it there, which partitions
exist, and which offsets they hold (earliest and end).

The pipeline's `source.kafka.options` are written for Spark's Java client
(`kafka.*`); the ones librdkafka understands under another spelling are
translated here, so status, verify and the start-up checks authenticate the
same way the query does.
"""

from __future__ import annotations

import re
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ingest.errors import IngestError
from ingest.spec import KafkaSource

_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SAME_NAME = ("security.protocol", "sasl.mechanism", "ssl.ca.location", "ssl.certificate.location",
              "ssl.key.location", "ssl.key.password", "ssl.endpoint.identification.algorithm")


class BrokerUnreachable(IngestError):
    """The broker did not answer, or refused our credentials."""


def client_config(kafka: KafkaSource) -> dict[str, str]:
    """librdkafka settings equivalent to the pipeline's Spark Kafka options."""
    config = {"bootstrap.servers": kafka.bootstrap_servers}
    options = dict(kafka.options)
    for key in _SAME_NAME:
        if key in options:
            config[key] = str(options[key])
    jaas = options.get("sasl.jaas.config")
    if jaas:
        fields = dict(_JAAS_FIELD.findall(jaas))
        if "username" in fields:
            config["sasl.username"] = fields["username"]
        if "password" in fields:
            config["sasl.password"] = fields["password"]
    return config


def _consumer(kafka: KafkaSource, errors: list) -> Consumer:
    return Consumer({
        **client_config(kafka),
        "group.id": f"ingest-admin-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": kafka.isolation_level,
        "socket.timeout.ms": 10000,
        # fail fast on bad credentials instead of retrying forever
        "error_cb": lambda err: errors.append(err),
        "logger": _silent_logger(),
    })


def _silent_logger():
    import logging

    logger = logging.getLogger("ingest.kafka_admin.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def partitions(kafka: KafkaSource, timeout: float = 15) -> dict[str, list[int]]:
    """The subscribed topics' partitions; raises BrokerUnreachable with a clear reason."""
    errors: list = []
    consumer = _consumer(kafka, errors)
    try:
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as error:
            raise BrokerUnreachable(_unreachable(kafka, errors, error)) from None
        pattern = re.compile(kafka.pattern) if kafka.pattern else None
        found = {}
        for name, topic in metadata.topics.items():
            if (pattern and pattern.fullmatch(name)) or name in kafka.topics:
                if topic.error is None:
                    found[name] = sorted(topic.partitions)
        return found
    finally:
        consumer.close()


def watermarks(kafka: KafkaSource, timeout: float = 15) -> dict[str, dict[int, tuple[int, int]]]:
    """(earliest, end) offset per partition of every subscribed topic."""
    errors: list = []
    found = partitions(kafka, timeout)
    consumer = _consumer(kafka, errors)
    try:
        marks: dict[str, dict[int, tuple[int, int]]] = {}
        for topic, parts in found.items():
            for partition in parts:
                try:
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                               timeout=timeout)
                except KafkaException as error:
                    raise BrokerUnreachable(_unreachable(kafka, errors, error)) from None
                marks.setdefault(topic, {})[partition] = (low, high)
        return marks
    finally:
        consumer.close()


def _unreachable(kafka: KafkaSource, errors: list, error: Exception) -> str:
    reasons = "; ".join(sorted({e.str() for e in errors if hasattr(e, "str")})) or str(error)
    return f"Kafka at {kafka.bootstrap_servers} did not answer: {reasons}"
