"""Read-only questions to the broker, outside Spark: is it there, which partitions
exist, and which offsets they hold (earliest and end).

The pipeline's `source.kafka.options` are written for Spark's Java client
(`kafka.*`). Every one is passed to librdkafka, which shares most names; the
JAAS line (PLAIN/SCRAM login, Kerberos keytab, OAUTHBEARER OIDC client) is
translated into librdkafka's own settings, and a setting librdkafka does not
know (a Java callback class, a JKS truststore) is left out. So status, verify
and the start-up checks authenticate the way the query does; a mechanism only
the Java client speaks (a login callback such as AWS MSK IAM) needs `ingest
run --no-preflight`.

Refused credentials (or a TLS failure) fail at once: librdkafka would retry them
until the timeout, and Spark's own client would retry for minutes. A bootstrap list
whose every broker refuses the connection (nothing listens there: a wrong port, a
broker not started) fails after a short grace for a broker that is just starting,
not after the whole timeout.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ingest.errors import IngestError
from ingest.kafka.offsets import Offsets
from ingest.spec.model import KafkaSource

_JAAS_FIELD = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# JAAS fields -> librdkafka settings, per login module
_JAAS_SETTINGS = {
    "username": "sasl.username", "password": "sasl.password",  # PLAIN, SCRAM
    "keyTab": "sasl.kerberos.keytab", "principal": "sasl.kerberos.principal",  # GSSAPI
    "clientId": "sasl.oauthbearer.client.id", "clientSecret": "sasl.oauthbearer.client.secret",
    "scope": "sasl.oauthbearer.scope",  # OAUTHBEARER with an OIDC token endpoint
}
# Java-client settings with no librdkafka meaning (JAAS is translated above; JKS stores and
# callback classes are Java's own); anything else librdkafka refuses is dropped by `_consumer`.
_JAVA_ONLY = ("sasl.jaas.config", "sasl.login.callback.handler.class",
              "sasl.client.callback.handler.class", "sasl.login.class", "ssl.truststore.location",
              "ssl.truststore.password", "ssl.truststore.type", "ssl.keystore.location",
              "ssl.keystore.password", "ssl.keystore.type", "ssl.protocol", "ssl.enabled.protocols")
_UNKNOWN_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
# Errors that no retry will cure: wrong credentials, TLS set-up, a fatal client state.
_REFUSED = (KafkaError._AUTHENTICATION, KafkaError._SSL)
DEFAULT_TIMEOUT_S = 15.0  # for the broker's answer to each question here
_STEP_S = 1.0  # how often a metadata request looks at the errors reported meanwhile
# How long every bootstrap broker may refuse the connection before we say so: a broker
# starting beside us (a compose file, the demo) listens within it; librdkafka reconnects
# after 0.1 s, then backs off.
ALL_DOWN_GRACE_S = 3.0


def nothing_listens(error_codes, waited_s: float) -> bool:
    """Every bootstrap broker has refused the connection (librdkafka's `_ALL_BROKERS_DOWN`
    among `error_codes`) and the grace for a starting broker is over."""
    return KafkaError._ALL_BROKERS_DOWN in error_codes and waited_s >= ALL_DOWN_GRACE_S

_QUIET = logging.getLogger("ingest.kafka.admin.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class BrokerUnreachable(IngestError):
    """The broker did not answer, or refused our credentials."""


def client_config(kafka: KafkaSource) -> dict[str, str]:
    """librdkafka settings equivalent to the pipeline's Spark Kafka options."""
    options = dict(kafka.options)
    config = {key: str(value) for key, value in options.items() if key not in _JAVA_ONLY}
    if config.get("ssl.endpoint.identification.algorithm") == "":  # Java's spelling of "none"
        config["ssl.endpoint.identification.algorithm"] = "none"
    fields = dict(_JAAS_FIELD.findall(options.get("sasl.jaas.config", "")))
    for field, setting in _JAAS_SETTINGS.items():
        if field in fields:
            config[setting] = _unescape(fields[field])
    if "sasl.oauthbearer.client.id" in config:
        config.setdefault("sasl.oauthbearer.method", "oidc")
    config["bootstrap.servers"] = kafka.bootstrap_servers
    return config


def _unescape(value: str) -> str:
    """JAAS quoted strings escape `"` and `\\` with a backslash."""
    return re.sub(r"\\(.)", r"\1", value)


def _consumer(kafka: KafkaSource, errors: list, **extra) -> Consumer:
    config = {
        **client_config(kafka),
        "group.id": f"ingest-admin-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "isolation.level": kafka.isolation_level,
        "socket.timeout.ms": 10000,
        # collected, so that refused credentials fail at once with librdkafka's reason
        "error_cb": errors.append,
        "logger": _QUIET,
        **extra,
    }
    while True:
        try:
            return Consumer(config)
        except KafkaException as error:  # a Java-only setting: the Java client still gets it
            unknown = _UNKNOWN_PROPERTY.search(str(error))
            if unknown is None or unknown.group(1) not in config:
                raise BrokerUnreachable(
                    f"the Python Kafka client cannot use source.kafka.options as given "
                    f"({error.args[0].str()}); `ingest run --no-preflight` leaves the checks to "
                    "Spark's own client") from None
            del config[unknown.group(1)]


def _metadata(consumer: Consumer, kafka: KafkaSource, errors: list, timeout: float):
    """The cluster metadata; raises BrokerUnreachable as soon as the broker refuses us."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        step = max(0.1, min(_STEP_S, deadline - time.monotonic()))
        try:
            return consumer.list_topics(timeout=step)
        except KafkaException as error:
            consumer.poll(0)  # serves error_cb: the reason is reported there, not in `error`
            refused = [e for e in errors if e.code() in _REFUSED or e.fatal()]
            if refused:
                raise BrokerUnreachable(f"Kafka at {kafka.bootstrap_servers} refused the connection: "
                                        f"{refused[0].str()}") from None
            now = time.monotonic()
            if now >= deadline or nothing_listens({e.code() for e in errors}, now - started):
                raise BrokerUnreachable(_unreachable(kafka, errors, error)) from None


def check_reachable(kafka: KafkaSource, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, list[int]]:
    """The pre-flight check before a query starts: the broker answers with these
    credentials. Returns the subscribed topics' partitions (a topic that does not
    exist is absent); raises BrokerUnreachable within `timeout`, at once for
    refused credentials."""
    return partitions(kafka, timeout)


def partitions(kafka: KafkaSource, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, list[int]]:
    """The subscribed topics' partitions; raises BrokerUnreachable with a clear reason."""
    errors: list = []
    consumer = _consumer(kafka, errors)
    try:
        metadata = _metadata(consumer, kafka, errors, timeout)
        pattern = re.compile(kafka.pattern) if kafka.pattern else None
        found = {}
        for name, topic in metadata.topics.items():
            if (pattern and pattern.fullmatch(name)) or name in kafka.topics:
                if topic.error is None:
                    found[name] = sorted(topic.partitions)
        return found
    finally:
        consumer.close()


def watermarks(kafka: KafkaSource, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, dict[int, tuple[int, int]]]:
    """(earliest, end) offset per partition of every subscribed topic. With
    read_committed, end is the last stable offset, as Spark's "latest" is."""
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


def first_record_between(kafka: KafkaSource, topic: str, partition: int, start: int, end: int,
                         timeout: float = DEFAULT_TIMEOUT_S) -> int | None:
    """The offset of the first record in [start, end) a read_committed reader gets, or
    None when the range holds only transaction markers and aborted records."""
    errors: list = []
    consumer = _consumer(kafka, errors, **{"enable.partition.eof": True})
    try:
        _metadata(consumer, kafka, errors, timeout)
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(_STEP_S)
            if message is None:
                continue
            if message.error() is None:
                return message.offset() if message.offset() < end else None
            if message.error().code() == KafkaError._PARTITION_EOF:
                return None
            raise BrokerUnreachable(f"reading {topic}/{partition} at {start}: {message.error().str()}")
        raise BrokerUnreachable(f"reading {topic}/{partition} at {start}: no answer within {timeout:.0f}s")
    finally:
        consumer.close()


def _unreachable(kafka: KafkaSource, errors: list, error: Exception) -> str:
    reasons = "; ".join(sorted({e.str() for e in errors if hasattr(e, "str")})) or str(error)
    return f"Kafka at {kafka.bootstrap_servers} did not answer: {reasons}"


def record_timestamps(kafka: KafkaSource, positions: Offsets,
                      timeout: float = 5) -> Offsets:
    """The timestamp (ms) of the record at each given offset, as a read_committed
    reader sees it: what "lag in seconds" is measured from. A partition with no
    record there yet is left out."""
    wanted = [TopicPartition(t, p, o) for t, parts in positions.items() for p, o in parts.items()]
    if not wanted:
        return {}
    errors: list = []
    consumer = _consumer(kafka, errors, **{"enable.partition.eof": True})
    found: Offsets = {}
    try:
        consumer.assign(wanted)
        remaining = {(tp.topic, tp.partition) for tp in wanted}
        deadline = time.monotonic() + timeout
        while remaining and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            key = (message.topic(), message.partition())
            if key in remaining and message.error() is None:
                found.setdefault(key[0], {})[key[1]] = message.timestamp()[1]
            if key in remaining and (message.error() is None
                                     or message.error().code() == KafkaError._PARTITION_EOF):
                remaining.discard(key)
                consumer.pause([TopicPartition(*key)])
        return found
    finally:
        consumer.close()


def offsets_for_time(kafka: KafkaSource, partitions_of: dict[str, list[int]], at_ms: int,
                     timeout: float = DEFAULT_TIMEOUT_S) -> Offsets:
    """Per partition, the first offset whose record timestamp is at or after `at_ms`;
    a partition with none gets -1 (nothing that late yet)."""
    errors: list = []
    consumer = _consumer(kafka, errors)
    try:
        wanted = [TopicPartition(t, p, at_ms) for t, parts in partitions_of.items() for p in parts]
        found: Offsets = {}
        for tp in consumer.offsets_for_times(wanted, timeout=timeout):
            found.setdefault(tp.topic, {})[tp.partition] = tp.offset
        return found
    except KafkaException as error:
        raise BrokerUnreachable(_unreachable(kafka, errors, error)) from None
    finally:
        consumer.close()


def topic_ids(kafka: KafkaSource, topics, timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, str]:
    """Each existing topic's id: a topic deleted and created again under the same
    name has a new one (and its offsets start again at 0)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    settings: dict = {**client_config(kafka), "logger": _QUIET}
    admin = AdminClient(settings)
    found = {}
    for name, future in admin.describe_topics(TopicCollection(sorted(topics)),
                                              request_timeout=timeout).items():
        try:
            found[name] = str(future.result(timeout=timeout).topic_id)
        except KafkaException as error:
            if error.args and error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise BrokerUnreachable(f"Kafka at {kafka.bootstrap_servers}: describing {name}: {error}") from None
    return found


def compacted_topics(kafka: KafkaSource, topics, timeout: float = DEFAULT_TIMEOUT_S) -> set[str]:
    """The topics whose `cleanup.policy` includes `compact`: the log cleaner may have
    removed any record of them that a later one with the same key superseded."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    settings: dict = {**client_config(kafka), "logger": _QUIET}
    admin = AdminClient(settings)
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(topics)]
    if not resources:
        return set()
    found = set()
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entries = future.result(timeout=timeout)
        except KafkaException as error:
            if error.args and error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise BrokerUnreachable(f"Kafka at {kafka.bootstrap_servers}: describing the configs of "
                                    f"{resource.name}: {error}") from None
        policy = entries.get("cleanup.policy")
        if policy is not None and "compact" in str(policy.value or ""):
            found.add(resource.name)
    return found
