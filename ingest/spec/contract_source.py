"""The contract's `source` section, key by key: kafka (servers, topics or pattern,
starting offsets, options), format, schema or schemas, registry, schema_file, message.
`check_source` adds every problem to the `Check` and returns None when there was one."""

from __future__ import annotations

import re
from typing import Any

from ingest.spec.model import (
    FORMATS,
    ISOLATION_LEVELS,
    REGISTRY_FORMATS,
    UNKNOWN_FIELDS,
    KafkaSource,
    Registry,
    RegistryTls,
    Source,
    frozen_map,
)
from ingest.spec.values import Check, did_you_mean
from ingest.spec.variant_path import VARIANT_SCHEMA
from ingest.spec.yaml_tree import join

SOURCE_KEYS = ("kafka", "format", "schema", "schemas", "registry", "schema_file", "message", "unknown_fields")
REGISTRY_KEYS = ("url", "subject", "version", "auth", "tls")
AUTH_KEYS = ("basic", "bearer")
TLS_KEYS = ("ca", "cert", "key")
SCHEMA_FILE_SUFFIXES = {"avro": (".avsc",), "protobuf": (".proto",)}
KAFKA_KEYS = ("bootstrap_servers", "topics", "pattern", "starting_offsets",
              "max_offsets_per_trigger", "isolation_level", "allow_data_loss", "options")
STARTING_OFFSETS = ("earliest", "latest")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Kafka consumer settings that ingest derives from the spec (or Spark forbids).
RESERVED_OPTIONS = {
    "bootstrap.servers": "source.kafka.bootstrap_servers",
    "isolation.level": "source.kafka.isolation_level",
    "auto.offset.reset": "source.kafka.starting_offsets",
    "enable.auto.commit": "the checkpoint (offsets are committed by ingest, not Kafka)",
    "key.deserializer": "ingest (keys and values are read as bytes)",
    "value.deserializer": "ingest (keys and values are read as bytes)",
    "interceptor.classes": "nothing (Spark's Kafka source does not allow it)",
}


def check_source(c: Check, top: dict) -> Source | None:
    raw = c.need(top, "", "source", "a mapping with kafka, format and schema")
    source = c.mapping("source", raw, SOURCE_KEYS)
    if source is None:
        return None
    mark = c.mark()
    kafka = _kafka(c, source)
    fmt = c.enum("source.format", source.get("format"), FORMATS, "a format", default="json")
    schema = c.text("source.schema", source.get("schema"),
                             'a Spark DDL schema, e.g. "id STRING, ts TIMESTAMP"')
    schemas = _schemas(c, source.get("schemas"), kafka)
    # with cdc the columns may come from the messages' own schemas (batch/message_columns.py)
    if fmt == "json" and source.get("schema") is None and not schemas and "cdc" not in top \
            and not c.misspelt("source.schema"):
        c.add("schema_rules", "source", "format json needs a schema; expected source.schema: "
              'a Spark DDL string, e.g. "order_id STRING, ts TIMESTAMP"')
    if fmt in ("string", "bytes") and (schema is not None or schemas):
        where = "source.schema" if schema is not None else "source.schemas"
        c.add("schema_rules", where, f"a schema is only used with format json; expected no "
              f"schema with format {fmt} (the payload is one column, value)")
    registry = _registry(c, source.get("registry"))
    schema_file = c.text("source.schema_file", source.get("schema_file"),
                         "a schema file: .avsc for avro, .proto for protobuf")
    message = c.text("source.message", source.get("message"), "a protobuf message type, e.g. shop.Order")
    _schema_source_rules(c, source, fmt, schema_file)
    variant = fmt == "json" and schema is not None and schema.strip().lower() == VARIANT_SCHEMA
    if variant:
        schema = VARIANT_SCHEMA
        _variant_rules(c, source, schemas, "cdc" in top)
    unknown_fields = _unknown_fields(c, source.get("unknown_fields"), fmt, "cdc" in top, variant)
    if c.failed(mark):
        return None
    return Source(kafka, fmt, schema, frozen_map(schemas), registry, schema_file, message,
              unknown_fields)


def _variant_rules(c: Check, source: dict, schemas: dict[str, str], with_cdc: bool) -> None:
    """`schema: variant` keeps each record whole: no field is unknown to it, it has no columns
    for cdc's row, and it is one schema for every topic."""
    if source.get("unknown_fields") is not None:
        c.add("schema_rules", "source.unknown_fields", "the VARIANT payload keeps every field; expected no "
              "unknown_fields with schema: variant")
    if with_cdc:
        c.add("cdc_rules", "source.schema", "cdc reads the row's columns from the envelope; expected a DDL "
              "schema with cdc, not variant")
    if schemas:
        c.add("schema_rules", "source.schemas", "schema: variant is every topic's; expected no "
              "source.schemas with it")


def _unknown_fields(c: Check, raw: Any, fmt: str | None, with_cdc: bool, variant: bool = False) -> str:
    """json payloads only: the other formats resolve a writer's fields by their own rules,
    and a change's row by its envelope (a VARIANT payload's rule is `_variant_rules`')."""
    path = "source.unknown_fields"
    if variant or (raw is None and (fmt != "json" or with_cdc)):
        return "ignore"
    if raw is not None and (fmt != "json" or with_cdc):
        c.add("schema_rules", path, "only used with format json without cdc; expected no unknown_fields "
              f"with {'cdc' if with_cdc else f'format {fmt}'}")
        return "ignore"
    return c.enum(path, raw, UNKNOWN_FIELDS, "an unknown-fields policy", default="warn") or "warn"


def _schema_source_rules(c: Check, source: dict, fmt: str | None, schema_file: str | None) -> None:
    """avro and protobuf: exactly one of registry and schema_file; message for protobuf only."""
    given = [key for key in ("registry", "schema_file") if source.get(key) is not None]
    if fmt not in REGISTRY_FORMATS:
        for key in given + (["message"] if source.get("message") is not None else []):
            c.add("schema_rules", f"source.{key}", f"only used with format avro or protobuf; "
                  f"expected no {key} with format {fmt}")
        return
    for key in ("schema", "schemas"):
        if source.get(key) is not None:
            c.add("schema_rules", f"source.{key}", f"format {fmt} reads its schema from the registry "
                  f"or schema_file; expected no {key} (the columns are the reader schema's fields)")
    if len(given) != 1 and not (c.misspelt("source.registry") or c.misspelt("source.schema_file")):
        found = "both are given" if given else "neither is given"
        c.add("schema_rules", "source", f"format {fmt} needs registry or schema_file; {found}; "
              "expected exactly one of them")
    if schema_file is not None and not schema_file.endswith(SCHEMA_FILE_SUFFIXES[fmt]):
        c.add("bad_value", "source.schema_file", f"{schema_file!r} is not a {fmt} schema file; "
              f"expected a file ending in {SCHEMA_FILE_SUFFIXES[fmt][0]}")
    if fmt == "avro" and source.get("message") is not None:
        c.add("schema_rules", "source.message", "message is only used with format protobuf; "
              "expected no message with format avro")
    if fmt == "protobuf" and schema_file is not None and source.get("message") is None \
            and not c.misspelt("source.message"):
        c.add("schema_rules", "source", "a .proto schema_file needs message; expected "
              "source.message: the message type, e.g. shop.Order")


def _registry(c: Check, raw: Any) -> Registry | None:
    p = "source.registry"
    registry = c.mapping(p, raw, REGISTRY_KEYS) if raw is not None else None
    if registry is None:
        return None
    mark = c.mark()
    url = c.text(f"{p}.url", c.need(registry, p, "url", "the registry's http(s) URL"),
                 "the registry's http(s) URL")
    if url is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        c.add("bad_value", f"{p}.url", "not an http(s) URL; expected e.g. https://registry:8081")
    subject = c.text(f"{p}.subject", registry.get("subject"), "a subject, e.g. orders-value")
    version = _registry_version(c, registry.get("version"))
    basic, bearer = _registry_auth(c, registry.get("auth"))
    tls = _registry_tls(c, registry.get("tls"))
    if c.failed(mark):
        return None
    return Registry(url, subject, version, basic, bearer, tls)


def _registry_version(c: Check, value: Any) -> str | int:
    path = "source.registry.version"
    if value is None or value == "latest":
        return "latest"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.isdigit() and int(value) >= 1:
        return int(value)
    c.add("bad_value", path, f"{value!r} is not a schema version; expected latest or a version "
          "number (1, 2, ...)")
    return "latest"


def _registry_auth(c: Check, raw: Any) -> tuple[str | None, str | None]:
    p = "source.registry.auth"
    auth = c.mapping(p, raw, AUTH_KEYS) if raw is not None else None
    if not auth:
        return None, None
    basic = c.text(f"{p}.basic", auth.get("basic"), '"user:password", e.g. "${SR_USER}:${SR_PASSWORD}"')
    bearer = c.text(f"{p}.bearer", auth.get("bearer"), "a bearer token, e.g. ${SR_TOKEN}")
    if basic is not None and ":" not in basic:
        c.add("bad_value", f"{p}.basic", 'not user:password; expected "${SR_USER}:${SR_PASSWORD}"')
    if basic is not None and bearer is not None:
        c.add("exclusive_keys", p, "basic and bearer are both given; expected one of them")
    return basic, bearer


def _registry_tls(c: Check, raw: Any) -> RegistryTls | None:
    p = "source.registry.tls"
    tls = c.mapping(p, raw, TLS_KEYS) if raw is not None else None
    if not tls:
        return None
    files = {key: c.text(f"{p}.{key}", tls.get(key), "a PEM file") for key in TLS_KEYS}
    if (files["cert"] is None) != (files["key"] is None):
        c.add("bad_value", p, "cert and key go together; expected both (mutual TLS) or neither")
    return RegistryTls(**files)


def _schemas(c: Check, raw: Any, kafka: KafkaSource | None) -> dict[str, str]:
    """`schemas: {topic: DDL}`: a topic's own schema; the others use `schema`."""
    path = "source.schemas"
    values = c.scalar_map(path, raw) or {}
    for topic in values:
        entry = join(path, topic)
        if not TOPIC.fullmatch(topic):
            c.add("bad_value", entry, f"{topic!r} is not a Kafka topic name; expected letters, "
                  "digits, '.', '_' and '-'")
        elif kafka is not None and kafka.topics and topic not in kafka.topics:
            c.add("bad_value", entry, f"topic {topic!r} is not subscribed; expected one of "
                  f"{', '.join(kafka.topics)}{did_you_mean(topic, kafka.topics)}")
        elif kafka is not None and kafka.pattern and not _matches(kafka.pattern, topic):
            c.add("bad_value", entry, f"topic {topic!r} does not match source.kafka.pattern "
                  f"{kafka.pattern!r}; expected a topic the pattern subscribes to")
    return values


def _matches(pattern: str, topic: str) -> bool:
    try:
        return re.fullmatch(pattern, topic) is not None
    except re.error:
        return True  # the pattern itself is reported


def _kafka(c: Check, source: dict) -> KafkaSource | None:
    raw = c.need(source, "source", "kafka", "a mapping with bootstrap_servers and topics or pattern")
    kafka = c.mapping("source.kafka", raw, KAFKA_KEYS)
    if kafka is None:
        return None
    mark, p = c.mark(), "source.kafka"
    servers = c.text(f"{p}.bootstrap_servers", c.need(kafka, p, "bootstrap_servers",
                                                       "host:port[,host:port...]"),
                     "host:port[,host:port...]")
    topics, pattern = _subscription(c, kafka)
    starting = _starting_offsets(c, kafka.get("starting_offsets"), topics)
    max_offsets = c.integer(f"{p}.max_offsets_per_trigger", kafka.get("max_offsets_per_trigger",
                                                                    KafkaSource.max_offsets_per_trigger),
                            minimum=1, expected="a positive integer")
    isolation = c.enum(f"{p}.isolation_level", kafka.get("isolation_level"), ISOLATION_LEVELS,
                       "an isolation level", default="read_committed")
    allow_loss = c.boolean(f"{p}.allow_data_loss", kafka.get("allow_data_loss"), default=False)
    options = _options(c, kafka.get("options"))
    if c.failed(mark):
        return None
    return KafkaSource(servers, topics, pattern, starting, max_offsets, isolation, allow_loss,
                       frozen_map(options))


def _subscription(c: Check, kafka: dict) -> tuple[tuple[str, ...], str | None]:
    p = "source.kafka"
    topics = c.texts(f"{p}.topics", kafka.get("topics"), "a list of topic names, e.g. [orders]",
                     non_empty=True, item="a topic name") or ()
    for n, topic in enumerate(topics):
        if not TOPIC.fullmatch(topic):
            c.add("bad_value", f"{p}.topics[{n}]", f"{topic!r} is not a Kafka topic name; expected "
                  "letters, digits, '.', '_' and '-'")
    pattern = c.text(f"{p}.pattern", kafka.get("pattern"), "a regular expression")
    if pattern is not None:
        _pattern(c, pattern)
    if kafka.get("topics") is not None and kafka.get("pattern") is not None:
        c.add("exclusive_keys", f"{p}.pattern", "topics and pattern are both given; expected exactly one of them")
    elif kafka.get("topics") is None and kafka.get("pattern") is None \
            and not (c.misspelt(f"{p}.topics") or c.misspelt(f"{p}.pattern")):
        c.add("missing_key", p, "neither topics nor pattern is given; expected exactly one of them")
    return tuple(topics), pattern


def _pattern(c: Check, pattern: str) -> None:
    # Python's re stands in for Java's regex here: the syntax topic patterns use is shared.
    try:
        re.compile(pattern)
    except re.error as error:
        c.add("bad_value", "source.kafka.pattern", f"{pattern!r} is not a regular expression "
              f"({error}); expected a Java regular expression, e.g. \"orders\\\\..*\"")


def _starting_offsets(c: Check, raw: Any, topics: tuple[str, ...]):
    path = "source.kafka.starting_offsets"
    if isinstance(raw, dict):
        return _offset_map(c, path, raw, topics)
    return c.enum(path, raw, STARTING_OFFSETS, "a starting position", default="earliest",
                  extra="or {topic: {partition: offset}}")


def _offset_map(c: Check, path: str, raw: dict, topics: tuple[str, ...]):
    if not raw:
        c.add("bad_offsets", path, "empty map; expected {topic: {partition: offset}}")
    result = {}
    for topic, partitions in raw.items():
        topic_path = join(path, topic)
        if topics and topic not in topics:
            c.add("bad_offsets", topic_path, f"topic {topic!r} is not subscribed; expected one of "
                  f"{', '.join(topics)}{did_you_mean(str(topic), topics)}")
        if not isinstance(partitions, dict) or not partitions:
            c.add("bad_offsets", topic_path, f"found {c.describe(topic_path, partitions)}; "
                  "expected a map {partition: offset}, e.g. {0: 42, 1: 17}")
            continue
        result[str(topic)] = frozen_map(_partition_offsets(c, topic_path, partitions))
    return frozen_map(result)


def _partition_offsets(c: Check, path: str, partitions: dict) -> dict[int, int]:
    offsets = {}
    for partition, offset in partitions.items():
        number = _whole(partition)
        entry = join(path, partition)
        if number is None or number < 0:
            c.add("bad_offsets", entry, f"{partition!r} is not a partition number; expected 0, 1, ...")
        elif _whole(offset) is None or _whole(offset) < -2:
            c.add("bad_offsets", entry, f"found {c.describe(entry, offset)}; expected an offset "
                  "(0 or more; -2 for earliest, -1 for latest)")
        else:
            offsets[number] = _whole(offset)
    return offsets


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None


def _options(c: Check, raw: Any) -> dict[str, str]:
    options = c.scalar_map("source.kafka.options", raw) or {}
    for key in list(options):
        path = join("source.kafka.options", key)
        if key.startswith("kafka."):
            c.add("bad_value", path, f"options are passed as kafka.<key>; expected the key without "
                  f"the prefix: {key[len('kafka.'):]!r}")
        elif key in RESERVED_OPTIONS:
            c.add("reserved_option", path, f"set by ingest; expected it in {RESERVED_OPTIONS[key]}")
    return options

