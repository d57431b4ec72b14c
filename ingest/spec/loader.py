"""YAML text -> `Pipeline`, finding every problem in one pass.

The steps: safe load with a line index (`yaml_tree`), `${VAR}` resolution
(`settings` says where values come from), then a check of every key against
the contract that builds the frozen `spec` values. Problems are collected, not
raised one by one, and raised together as `SpecErrors`, sorted by line. Pure
Python: the Spark checks of DDL and SQL are a second pass (`sql_check`),
placed on lines with `Loaded.place`.

Raw dicts never leave this module: callers get a `Pipeline`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from ingest.errors import Problem, SpecErrors
from ingest.spec import operations as operations_spec
from ingest.spec import settings as conf
from ingest.spec import template
from ingest.spec.locations import path_key, table_key
from ingest.spec.model import (
    CDC_ENCODINGS,
    CDC_FORMATS,
    DELETES,
    FORMATS,
    ISOLATION_LEVELS,
    MODES,
    REGISTRY_FORMATS,
    SCHEMA_EVOLUTIONS,
    UID_KINDS,
    Cdc,
    DeadLetter,
    DedupHorizon,
    KafkaSource,
    Pipeline,
    Registry,
    RegistryTls,
    Source,
    Target,
    Transform,
    Trigger,
    Uid,
    frozen_map,
)
from ingest.spec.values import Check, did_you_mean, one_of, parse_duration
from ingest.spec.yaml_tree import LineIndex, join, read_yaml

TOP_KEYS = ("name", "source", "transform", "uid", "target", "checkpoint", "dead_letter",
            "trigger", "spark_conf", "cdc", "schema_evolution") + operations_spec.TOP_KEYS
SOURCE_KEYS = ("kafka", "format", "schema", "schemas", "registry", "schema_file", "message")
REGISTRY_KEYS = ("url", "subject", "version", "auth", "tls")
AUTH_KEYS = ("basic", "bearer")
TLS_KEYS = ("ca", "cert", "key")
SCHEMA_FILE_SUFFIXES = {"avro": (".avsc",), "protobuf": (".proto",)}
KAFKA_KEYS = ("bootstrap_servers", "topics", "pattern", "starting_offsets",
              "max_offsets_per_trigger", "isolation_level", "allow_data_loss", "options")
TRANSFORM_KEYS = ("select", "where")
TARGET_KEYS = ("path", "table", "mode", "order_by", "partition_by", "cluster_by", "dedup_horizon",
               "deletes", "history")
CDC_KEYS = ("format", "key", "sequence", "encodings")
# `cdc.sequence` values that name the envelope rather than a row column
ENVELOPE_SEQUENCES = ("ts_ms",)
ENVELOPE_SOURCE_PREFIX = "source."
HORIZON_KEYS = ("column", "within")
DEAD_LETTER_KEYS = ("path", "table")
TRIGGER_KEYS = ("available_now", "processing_time")
STARTING_OFFSETS = ("earliest", "latest")

NAME = re.compile(r"[a-z][a-z0-9_]*")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
IDENTIFIER = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)"
TABLE_NAME = re.compile(rf"{IDENTIFIER}(?:\.{IDENTIFIER}){{0,2}}")
VAR_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
VAR_INNER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
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
# Columns ingest adds to the target; the payload may not use them.
INGEST_COLUMNS = ("_uid", "_topic", "_partition", "_offset", "_kafka_timestamp", "_ingested_at")
# ... and with cdc, deletes or history
CHANGE_COLUMNS = ("_sequence", "_op", "_deleted", "_valid_from", "_valid_to", "_current")
TIMESTAMP_TYPES = ("TIMESTAMP", "TIMESTAMP_LTZ")


@dataclass(frozen=True)
class Loaded:
    """A valid pipeline with the line index it came from (for the Spark pass)."""

    pipeline: Pipeline
    index: LineIndex
    warnings: tuple[Problem, ...] = ()

    def place(self, problems: Iterable[Problem]) -> list[Problem]:
        """Problems found later (Spark pass) with this file's lines; messages masked."""
        placed = [replace(p, file=p.file or self.index.file, line=p.line or self.index.line(p.path))
                  for p in problems]
        return _masked(placed, self.pipeline.secret_values)


def load_pipeline(path: str | Path, env: str = conf.DEFAULT_ENV,
                  environ: Mapping[str, str] | None = None,
                  conf_dir: str | Path | None = None) -> Pipeline:
    """The pipeline in `path`; raises SpecErrors with every problem found."""
    return read_pipeline(path, env, environ, conf_dir).pipeline


def load_text(text: str, file: str = "<text>", env: str = conf.DEFAULT_ENV,
              environ: Mapping[str, str] | None = None, conf_dir: str | Path | None = None,
              settings: conf.Settings | None = None) -> Pipeline:
    return read_text(text, file, env, environ, conf_dir, settings).pipeline


def read_pipeline(path: str | Path, env: str = conf.DEFAULT_ENV,
                  environ: Mapping[str, str] | None = None,
                  conf_dir: str | Path | None = None,
                  settings: conf.Settings | None = None,
                  read_secret: conf.SecretReader | None = None) -> Loaded:
    """`read_text` of a file; an unreadable file is a problem too."""
    text = conf.read_text_file(path, "file")
    return read_text(text, str(path), env, environ, conf_dir, settings, read_secret)


def read_text(text: str, file: str = "<text>", env: str = conf.DEFAULT_ENV,
              environ: Mapping[str, str] | None = None, conf_dir: str | Path | None = None,
              settings: conf.Settings | None = None,
              read_secret: conf.SecretReader | None = None) -> Loaded:
    """The lower-level loader: a `Loaded` (pipeline + line index + warnings)."""
    settings = settings or conf.load_settings(env, conf_dir)
    environ = os.environ if environ is None else environ
    doc = read_yaml(text, file)
    if any(problem.code == "yaml_syntax" for problem in doc.problems):
        raise SpecErrors(doc.problems)  # nothing else can be known about the file
    resolved = _Resolver(doc.index, settings, environ, read_secret).tree(doc.value)
    found_so_far = doc.problems + tuple(resolved.problems)
    check = Check(doc.index, resolved.from_vars, found_so_far)
    check.problems.extend(found_so_far)
    pipeline = build(check, resolved.value)
    secrets = frozenset(resolved.secrets) | registry_secrets(pipeline)
    if check.problems:
        raise SpecErrors(_masked(check.problems, secrets))
    pipeline = replace(pipeline, source_file=file, secret_values=secrets)
    return Loaded(pipeline, doc.index, tuple(_masked(check.warnings, secrets)))


def registry_secrets(pipeline: Pipeline | None) -> frozenset[str]:
    """The registry's credentials, also when written literally: never printed."""
    registry = pipeline.source.registry if pipeline and pipeline.source else None
    if registry is None:
        return frozenset()
    secrets = {registry.bearer, registry.basic}
    if registry.basic and ":" in registry.basic:
        secrets.add(registry.basic.split(":", 1)[1])
    password = re.match(r"[a-z]+://[^/@]*:([^/@]+)@", registry.url)
    if password:
        secrets.add(password.group(1))
    return frozenset(s for s in secrets if s)


def _masked(problems: Iterable[Problem], secrets: frozenset[str]) -> list[Problem]:
    return [replace(p, message=conf.mask(p.message, secrets)) for p in problems]


def check_unique(loaded: Iterable[Loaded]) -> list[Problem]:
    """Problems where pipelines validated together share a name, a checkpoint or a
    target (however spelled: `a/cp` and `a/cp/` are one checkpoint)."""
    problems: list[Problem] = []
    seen: dict = {}
    for one in loaded:
        pipeline = one.pipeline
        target = ("target.table", pipeline.target.table, "table:" + table_key(pipeline.target.table)) \
            if pipeline.target.table else ("target.path", pipeline.target.path, path_key(pipeline.target.path))
        for key, value, same in (("name", pipeline.name, pipeline.name),
                                 ("checkpoint", pipeline.checkpoint, path_key(pipeline.checkpoint)), target):
            first = seen.setdefault((key.split(".")[0], same), one)
            if first is not one:
                problems.append(Problem(
                    "duplicate_name", key, f"{value!r} is also the {key.split('.')[0]} of "
                    f"{first.index.file}; expected a {key.split('.')[0]} of its own",
                    one.index.line(key), one.index.file))
    return problems


# --- ${VAR} resolution -------------------------------------------------------


@dataclass
class _Resolved:
    value: Any
    from_vars: set[str]  # paths whose value came (partly) from a variable
    secrets: set[str]
    problems: list[Problem]


class _Resolver:
    """Replaces ${VAR} and ${VAR:-default} in every string value of the tree."""

    def __init__(self, index: LineIndex, settings: conf.Settings, environ: Mapping[str, str],
                 read_secret: conf.SecretReader | None):
        self.index, self.settings, self.environ = index, settings, environ
        self.read_secret = read_secret
        self.out = _Resolved(None, set(), set(), [])

    def tree(self, value: Any) -> _Resolved:
        self.out.value = self.walk(value, "")
        return self.out

    def walk(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            resolved = {key: self.walk(child, join(path, key)) for key, child in value.items()}
            self.secret_keys(resolved)
            return resolved
        if isinstance(value, list):
            return [self.walk(child, f"{path}[{n}]") for n, child in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            self.out.from_vars.add(path)
            return VAR_REF.sub(lambda match: self.reference(match, path), value)
        return value

    def secret_keys(self, mapping: dict) -> None:
        """Values under secret-looking keys are secret even when written literally."""
        for key, value in mapping.items():
            if conf.is_secret_key(key) and isinstance(value, (str, int, float)):
                self.out.secrets.add(str(value))

    def reference(self, match: re.Match, path: str) -> str:
        if match.group(0) == "$${":
            return "${"  # $${ escapes a literal ${
        if match.group(1) is None:
            self.problem("bad_variable", path, f"{match.string[match.start():]!r} has no closing }}; "
                         "expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)")
            return match.group(0)
        inner = VAR_INNER.fullmatch(match.group(1))
        if inner is None:
            self.problem("bad_variable", path, f"{match.group(0)!r} is not a variable reference; "
                         "expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)")
            return match.group(0)
        return self.value(inner.group(1), inner.group(2), path, match.group(0))

    def value(self, name: str, default: str | None, path: str, written: str) -> str:
        if name in template.VARIABLES:
            return self.template_variable(name, path, written)
        found = conf.lookup(self.settings, name, self.environ, self.read_secret)
        value = found.value
        if not value and default is not None:  # shell semantics: `:-` also covers empty
            value = default
        if value is None and path in template.TEMPLATE_KEYS and _looks_like_template(name):
            self.problem("unknown_template", path, f"{written} is not a template variable "
                         f"(nor a variable set in {self.settings.places(name)}); expected "
                         f"{one_of('${' + v + '}' for v in template.VARIABLES)}"
                         f"{did_you_mean('${' + name + '}', ['${' + v + '}' for v in template.VARIABLES])}")
            return ""
        if value is None:
            self.problem("missing_variable", path, f"${{{name}}} is not set (looked in "
                         f"{self.settings.places(name)}); expected a value there, "
                         f"or a default: ${{{name}:-value}}")
            return ""
        if found.secret:
            self.out.secrets.add(value)
        return value

    def template_variable(self, name: str, path: str, written: str) -> str:
        """Kept as written: filled in per topic at run time (`template.for_topic`)."""
        if path not in template.TEMPLATE_KEYS:
            self.problem("unknown_template", path, f"{written} is a template variable, filled in "
                         f"per topic; expected it only in {one_of(template.TEMPLATE_KEYS)}")
            return ""
        if written != template.TOPIC:
            self.problem("unknown_template", path, f"{written} takes no default; expected "
                         f"{template.TOPIC}")
            return ""
        return written

    def problem(self, code: str, path: str, message: str) -> None:
        self.out.problems.append(Problem(code, path, message, self.index.line(path), self.index.file))


def _looks_like_template(name: str) -> bool:
    """Template variables are lower case; an unset lower-case name, or one close to a
    template variable (`${Topic}`), is taken for a misspelt one, not for the environment."""
    return name == name.lower() or name.lower() in template.VARIABLES \
        or did_you_mean(name, template.VARIABLES) != ""


# --- the contract, key by key --------------------------------------------------


def build(c: Check, raw: Any) -> Pipeline | None:
    """Check the resolved tree against the contract; the Pipeline if nothing is wrong."""
    top = c.root(raw, TOP_KEYS, "a pipeline: a mapping with name, source, uid, target and checkpoint")
    if top is None:
        return None
    name = _name(c, top)
    source = _source(c, top)
    transform = _transform(c, top.get("transform"))
    cdc = _cdc(c, top.get("cdc"))
    uid = _cdc_uid(c, top, cdc) if "cdc" in top else _uid(c, top)
    target = _target(c, top, cdc is not None or "cdc" in top)
    checkpoint = c.text("checkpoint", c.need(top, "", "checkpoint", "a folder for the checkpoint"),
                        "a folder for the checkpoint")
    dead_letter = _dead_letter(c, top.get("dead_letter"), target)
    trigger = _trigger(c, top.get("trigger"))
    spark_conf = c.scalar_map("spark_conf", top.get("spark_conf"))
    operations = operations_spec.operations(c, top)
    source, operations = operations_spec.one_data_loss_policy(c, source, operations,
                                                                     "on_data_loss" in top)
    if target and uid:
        _deletes_rules(c, top, uid, target)
    if cdc is not None and source is not None and source.format not in ("json", "avro"):
        c.add("cdc_rules", "source.format", f"cdc reads Debezium envelopes in json or avro, not "
              f"{source.format}; expected format json or avro")
    evolution = c.enum("schema_evolution", top.get("schema_evolution"), SCHEMA_EVOLUTIONS,
                       "a schema evolution policy", default="add_columns")
    if source and target and uid:
        _columns(c, source, transform, uid, target, cdc)
    if source and target and dead_letter:
        _template_rules(c, source, target, dead_letter, "table_threads" in top)
    if c.problems:
        return None
    return Pipeline(name, source, uid, target, checkpoint, dead_letter, transform, trigger,
                    frozen_map(spark_conf), operations, cdc=cdc, schema_evolution=evolution)


def _name(c: Check, top: dict) -> str | None:
    name = c.text("name", c.need(top, "", "name", "the pipeline's name"), "the pipeline's name")
    if name is None or NAME.fullmatch(name):
        return name
    suggestion = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "pipeline"
    if not suggestion[0].isalpha():
        suggestion = "p_" + suggestion
    c.add("bad_name", "name", f"{name!r} is not a valid name; expected lowercase letters, digits "
          f"and _, starting with a letter (did you mean {suggestion!r}?)")
    return None


def _source(c: Check, top: dict) -> Source | None:
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
    if fmt == "json" and source.get("schema") is None and not schemas \
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
    if c.failed(mark):
        return None
    return Source(kafka, fmt, schema, frozen_map(schemas), registry, schema_file, message)


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


def _transform(c: Check, raw: Any) -> Transform | None:
    transform = c.mapping("transform", raw, TRANSFORM_KEYS) if raw is not None else None
    if transform is None:
        return None
    select = c.texts("transform.select", transform.get("select"),
                     'a list of Spark SQL expressions, e.g. ["*", "amount * 100 AS cents"]',
                     non_empty=True, item="a Spark SQL expression")
    where = c.text("transform.where", transform.get("where"),
                            'a Spark SQL condition, e.g. "amount IS NOT NULL"')
    return Transform(tuple(select) if select else ("*",), where)


def _uid(c: Check, top: dict) -> Uid | None:
    raw = c.need(top, "", "uid", "exactly one of header, field, fields, coordinates or key")
    uid = c.mapping("uid", raw, UID_KINDS)
    if uid is None:
        return None
    mark = c.mark()
    header = c.text("uid.header", uid.get("header"), "a Kafka header name")
    field = c.text("uid.field", uid.get("field"), "a payload column")
    fields = c.texts("uid.fields", uid.get("fields"), "a list of payload columns", non_empty=True,
                     unique=True, item="a column name")
    coordinates = c.boolean("uid.coordinates", uid.get("coordinates"), default=False)
    key = c.boolean("uid.key", uid.get("key"), default=False)
    # `coordinates: false` (or `key: false`) is no rule; any other value, even a wrong one, is one
    given = [kind for kind in UID_KINDS
             if uid.get(kind) is not None and not (kind in ("coordinates", "key") and uid[kind] is False)]
    misspelt = not given and any(c.misspelt(f"uid.{kind}") for kind in UID_KINDS)
    if len(given) != 1 and not misspelt:  # a misspelt rule is reported as an unknown key
        where = f"uid.{given[1]}" if len(given) > 1 else "uid"  # the rule that is one too many
        c.add("uid_rules", where, f"{_uid_rules_found(given)}; expected exactly one of header, "
              "field, fields, coordinates: true or key: true")
    elif coordinates:
        c.warn("coordinates_uid", "uid.coordinates", "a uid from topic/partition/offset is only "
               "exact with idempotent producers; a producer retry becomes a second record")
    return None if c.failed(mark) else Uid(header, field, tuple(fields or ()), bool(coordinates),
                                           bool(key))


def _uid_rules_found(given: list[str]) -> str:
    if not given:
        return "no uid rule is given"
    return f"{one_of(given, 'and')} are {'both' if len(given) == 2 else 'all'} given"


def _target(c: Check, top: dict, with_cdc: bool) -> Target | None:
    raw = c.need(top, "", "target", "a mapping with path or table, and mode")
    target = c.mapping("target", raw, TARGET_KEYS)
    if target is None:
        return None
    mark = c.mark()
    path, table = _location(c, "target", target)
    mode = c.enum("target.mode", target.get("mode"), MODES, "a mode",
                  default="upsert" if with_cdc else "insert_only")
    order_by = c.text("target.order_by", target.get("order_by"), "a payload column")
    if with_cdc:
        _cdc_target_rules(c, mode, target)
    else:
        _order_by_rules(c, mode, target)
    deletes = c.enum("target.deletes", target.get("deletes"), DELETES, "a way to delete",
                     default="soft")
    history = c.boolean("target.history", target.get("history"), default=False)
    partition_by = c.texts("target.partition_by", target.get("partition_by"), "a list of columns",
                           item="a column name")
    cluster_by = c.texts("target.cluster_by", target.get("cluster_by"), "a list of columns",
                         item="a column name")
    if partition_by and cluster_by:
        c.add("exclusive_keys", "target.cluster_by", "partition_by and cluster_by are both given; expected "
              "one of them (cluster_by is liquid clustering, which replaces partitions)")
    horizon = _horizon(c, target.get("dedup_horizon"))
    if horizon is not None and mode == "upsert":
        c.add("exclusive_keys", "target.dedup_horizon", "dedup_horizon is given with mode upsert: an "
              "update may move the horizon column by more than `within`, and the next version of that "
              "row would not be found and be inserted as a second row; expected dedup_horizon only "
              "with mode insert_only")
    if c.failed(mark):
        return None
    return Target(path, table, mode, order_by, tuple(partition_by or ()), tuple(cluster_by or ()),
                  horizon, deletes, bool(history))


def _cdc(c: Check, raw: Any) -> Cdc | None:
    values = c.mapping("cdc", raw, CDC_KEYS) if raw is not None else None
    if values is None:
        return None
    mark = c.mark()
    fmt = c.enum("cdc.format", values.get("format"), CDC_FORMATS, "a change data capture format",
                 default="debezium")
    key = c.texts("cdc.key", c.need(values, "cdc", "key", "a list of the row's key columns, e.g. [id]"),
                  "a list of the row's key columns, e.g. [id]", non_empty=True, unique=True,
                  item="a column name")
    sequence = _cdc_sequence(c, values.get("sequence"))
    encodings = _cdc_encodings(c, values.get("encodings"))
    if c.failed(mark) or not key:
        return None
    return Cdc(tuple(key), fmt, sequence, frozen_map(encodings))


SEQUENCE_ITEM = "source.<field>, ts_ms or a row column"


def _cdc_sequence(c: Check, raw: Any) -> str | tuple[str, ...] | None:
    """One item, or a list of them for a composite order (SQL Server's commit_lsn, change_lsn,
    event_serial_no); a one-item list is that item."""
    if isinstance(raw, list):
        items = c.texts("cdc.sequence", raw, f"a list of {SEQUENCE_ITEM}", non_empty=True,
                        unique=True, item=SEQUENCE_ITEM)
        paths = [f"cdc.sequence[{n}]" for n in range(len(items or ()))]
    else:
        item = c.text("cdc.sequence", raw, f"{SEQUENCE_ITEM} (e.g. source.lsn), or a list of them "
                      "for a composite order")
        items, paths = (None, []) if item is None else ([item], ["cdc.sequence"])
    if not items:
        return None
    for path, item in zip(paths, items, strict=True):
        if item.startswith(ENVELOPE_SOURCE_PREFIX) and not item[len(ENVELOPE_SOURCE_PREFIX):]:
            c.add("bad_value", path, f"{item!r} names no field of source; expected "
                  "source.<field>, e.g. source.lsn")
    return items[0] if len(items) == 1 else tuple(items)


def _cdc_encodings(c: Check, raw: Any) -> dict[str, str]:
    """column -> Debezium encoding, for a bare payload whose column type cannot tell."""
    if raw is None:
        return {}
    expected = "a mapping of column -> Debezium encoding, e.g. {orderdate: io.debezium.time.MicroTimestamp}"
    if not isinstance(raw, dict):
        c.wrong("cdc.encodings", raw, expected)
        return {}
    encodings = {}
    for column, name in raw.items():
        path = f"cdc.encodings.{column}"
        if name not in CDC_ENCODINGS:
            c.add("bad_value", path, f"{name!r} is not an encoding ingest reads; expected "
                  f"{one_of(CDC_ENCODINGS)}")
        else:
            encodings[str(column)] = name
    return encodings


def _cdc_uid(c: Check, top: dict, cdc: Cdc | None) -> Uid | None:
    """With cdc the row key is the uid: one column as it is, several hashed as uid.fields are."""
    if top.get("uid") is not None:
        c.add("cdc_rules", "uid", "with cdc the uid is the row key (cdc.key); expected no uid")
    if cdc is None:
        return None
    return Uid(field=cdc.key[0]) if len(cdc.key) == 1 else Uid(fields=cdc.key)


def _cdc_target_rules(c: Check, mode: str | None, target: dict) -> None:
    if mode == "insert_only":
        c.add("cdc_rules", "target.mode", "'insert_only' does not apply changes; expected upsert "
              "(with cdc, upsert is the only mode)")
    if target.get("order_by") is not None:
        c.add("cdc_rules", "target.order_by", "with cdc, changes are ordered by cdc.sequence; "
              "expected no order_by")


def _deletes_rules(c: Check, top: dict, uid: Uid, target: Target) -> None:
    """deletes: with cdc, or tombstones in an upsert by Kafka key; history: with cdc only."""
    raw = top.get("target") or {}
    with_cdc = "cdc" in top
    by_tombstone = uid is not None and uid.key and target.mode == "upsert"
    if raw.get("deletes") is not None and not with_cdc and not by_tombstone:
        c.add("cdc_rules", "target.deletes", "only cdc changes and tombstones in an upsert with "
              "uid: {key: true} delete (in insert_only a tombstone is a dead letter); expected a "
              "cdc section, uid: {key: true} with mode: upsert, or no deletes")
    if target.history and not with_cdc:
        c.add("cdc_rules", "target.history", "history (SCD type 2) keeps the versions of cdc "
              "changes; expected a cdc section, or no history")
    if target.history and target.deletes == "hard":
        c.add("cdc_rules", "target.deletes", "history keeps every version, a delete's too; "
              "expected deletes: soft with history")
    if target.history and target.dedup_horizon is not None:
        c.add("cdc_rules", "target.dedup_horizon", "a dedup horizon bounds duplicate search, which "
              "history does not do; expected no dedup_horizon with history")


def _location(c: Check, section: str, values: dict) -> tuple[str | None, str | None]:
    """Exactly one of path / table (target and dead_letter)."""
    path = c.text(f"{section}.path", values.get("path"), "a folder for the Delta table")
    table = c.text(f"{section}.table", values.get("table"), "a table name, e.g. main.sales.orders")
    if table is not None and not TABLE_NAME.fullmatch(template.render(table, "t", in_table_name=True)):
        c.add("bad_value", f"{section}.table", f"{table!r} is not a table name; expected "
              "[catalog.][schema.]table, e.g. main.sales.orders")
    if values.get("path") is not None and values.get("table") is not None:
        c.add("exclusive_keys", f"{section}.table", "path and table are both given; expected exactly one of them")
    elif values.get("path") is None and values.get("table") is None \
            and not (c.misspelt(f"{section}.path") or c.misspelt(f"{section}.table")):
        c.add("missing_key", section, "neither path nor table is given; expected exactly one of them")
    return path, table


def _order_by_rules(c: Check, mode: str | None, target: dict) -> None:
    given = target.get("order_by") is not None
    if mode == "upsert" and not given and not c.misspelt("target.order_by"):
        c.add("order_by_rules", "target.mode", "mode upsert needs order_by; expected target.order_by: "
              "the column whose latest value wins")
    elif mode == "insert_only" and given:
        c.add("order_by_rules", "target.order_by", "order_by is only used with mode upsert; expected "
              "mode: upsert, or no order_by (insert_only keeps the first copy of a uid)")


def _horizon(c: Check, raw: Any) -> DedupHorizon | None:
    horizon = c.mapping("target.dedup_horizon", raw, HORIZON_KEYS) if raw is not None else None
    if horizon is None:
        return None
    p = "target.dedup_horizon"
    column = c.text(f"{p}.column", c.need(horizon, p, "column", "a payload timestamp column"),
                    "a payload timestamp column")
    within = c.text(f"{p}.within", c.need(horizon, p, "within", 'a duration, e.g. "1 hour"'),
                    expected='a duration, e.g. "1 hour"', quote_hint=False)
    seconds = _duration(c, f"{p}.within", within) if within is not None else None
    if column is None or seconds is None:
        return None
    return DedupHorizon(column, within, seconds)


def _duration(c: Check, path: str, text: str) -> int | None:
    seconds, suggestion = parse_duration(text)
    if seconds is not None and seconds > 0:
        return seconds
    hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
    what = "more than 0" if seconds == 0 else "a whole number and a unit (seconds, minutes, " \
        'hours, days or weeks), e.g. "1 hour" or "30 minutes"'
    c.add("bad_duration", path, f"{text!r} is not a duration; expected {what}{hint}")
    return None


def _dead_letter(c: Check, raw: Any, target: Target | None) -> DeadLetter | None:
    if raw is None:
        if target is None:
            return None
        # contract default: next to the target, with a _dead_letter suffix
        if target.path is not None:
            return DeadLetter(path=f"{target.path}_dead_letter")
        return DeadLetter(table=f"{target.table}_dead_letter")
    values = c.mapping("dead_letter", raw, DEAD_LETTER_KEYS)
    if values is None:
        return None
    path, table = _location(c, "dead_letter", values)
    dead_letter = DeadLetter(path, table)
    if target is not None and dead_letter.location == target.location:
        c.add("bad_value", "dead_letter", f"{dead_letter.location!r} is the target itself; "
              "expected a table of its own for dead letters")
    return dead_letter


def _template_rules(c: Check, source: Source, target: Target, dead_letter: DeadLetter,
                    threads_given: bool = False) -> None:
    """Per-topic output (dead letters or schemas per topic) needs a per-topic target:
    otherwise every topic's records would meet in one table after all."""
    if template.TOPIC in target.location or any(p.path in template.TEMPLATE_KEYS[:2]
                                                for p in c.problems):
        return  # per topic, or a misspelt template already reported
    subscription = (f"source.kafka.pattern {source.kafka.pattern!r}" if source.kafka.pattern
                    else "source.kafka.topics")
    where = "target.table" if target.table else "target.path"
    if template.TOPIC in dead_letter.location:
        key = "dead_letter.table" if dead_letter.table else "dead_letter.path"
        c.add("template_rules", key, f"dead letters per topic, but one target for all of "
              f"{subscription}; expected {template.TOPIC} in {where} too, e.g. "
              f"{target.location.rstrip('/')}/{template.TOPIC}")
    if source.schemas:
        c.add("template_rules", "source.schemas", f"a schema per topic, but one target for all of "
              f"{subscription}; expected {template.TOPIC} in {where}, e.g. "
              f"{target.location.rstrip('/')}/{template.TOPIC}")
    if source.kafka.pattern and source.registry is not None and not source.registry.subject:
        c.add("template_rules", "source.registry", f"no subject, and one target for all of "
              f"{subscription}: the default subject is per topic (<topic>-value); expected "
              f"source.registry.subject, or {template.TOPIC} in {where} for a table per topic")
    if threads_given:
        c.add("template_rules", "table_threads", f"tables committed in parallel, but one target for all "
              f"of {subscription}; table_threads applies only with {template.TOPIC} in {where}")


def _trigger(c: Check, raw: Any) -> Trigger:
    trigger = c.mapping("trigger", raw, TRIGGER_KEYS) if raw is not None else None
    if not trigger:
        return Trigger()
    available_now = c.boolean("trigger.available_now", trigger.get("available_now"), default=None)
    interval = c.text("trigger.processing_time", trigger.get("processing_time"),
                      'a duration, e.g. "10 seconds"', quote_hint=False)
    if interval is not None:
        _duration(c, "trigger.processing_time", interval)
        if available_now:
            c.add("exclusive_keys", "trigger.processing_time", "available_now: true and processing_time are both "
                  "given; expected one of them")
        return Trigger(available_now=False, processing_time=interval)
    return Trigger(available_now=available_now is not False)


# --- columns, as far as they can be told without Spark -------------------------


def _columns(c: Check, source: Source, transform: Transform | None, uid: Uid, target: Target,
             cdc: Cdc | None) -> None:
    """Column references checked against the schema when no transform reshapes it;
    with a transform the Spark pass (sql_check) knows the columns."""
    columns = decoded_columns(source)
    if columns is None:
        return
    horizon = target.dedup_horizon
    if horizon is not None and horizon.column in columns:
        if columns[horizon.column] not in TIMESTAMP_TYPES:
            c.add("bad_column", "target.dedup_horizon.column", f"column {horizon.column!r} is "
                  f"{columns[horizon.column]}; expected a TIMESTAMP column")
    for column in cdc.encodings if cdc else ():
        if column not in columns:
            c.add("bad_column", f"cdc.encodings.{column}", f"{column!r} is not a column of the "
                  f"payload; expected one of {', '.join(columns)}{did_you_mean(column, list(columns))}")
    if transform is not None:
        return
    reserved = INGEST_COLUMNS + (CHANGE_COLUMNS if cdc or target.deletes != "soft"
                                 or uid.key else ())
    for path, column in column_references(uid, target, cdc):
        if column not in columns:
            c.add("bad_column", path, f"{column!r} is not a column of the payload; expected one of "
                  f"{', '.join(columns)}{did_you_mean(column, list(columns))}")
    for column in reserved:
        if column in columns:
            c.add("bad_column", "source.schema", f"column {column} is one ingest adds; expected "
                  "another name (or rename it in transform.select)")


def column_references(uid: Uid, target: Target, cdc: Cdc | None = None) -> list[tuple[str, str]]:
    """(key path, column) for every column the spec names outside SQL."""
    if cdc is not None:
        refs = [(f"cdc.key[{n}]", name) for n, name in enumerate(cdc.key)]
        listed = isinstance(cdc.sequence, tuple)
        refs += [(f"cdc.sequence[{n}]" if listed else "cdc.sequence", name)
                 for n, name in enumerate(cdc.sequence_items) if not is_envelope_sequence(name)]
    else:
        refs = [("uid.field", uid.field)] if uid.field else []
        refs += [(f"uid.fields[{n}]", name) for n, name in enumerate(uid.fields)]
    refs += [("target.order_by", target.order_by)] if target.order_by else []
    refs += [(f"target.partition_by[{n}]", name) for n, name in enumerate(target.partition_by)]
    refs += [(f"target.cluster_by[{n}]", name) for n, name in enumerate(target.cluster_by)]
    if target.dedup_horizon is not None:
        refs.append(("target.dedup_horizon", target.dedup_horizon.column))
    return refs


def is_envelope_sequence(sequence: str) -> bool:
    """`ts_ms` and `source.<field>` name the change envelope; anything else a row column."""
    return sequence in ENVELOPE_SEQUENCES or sequence.startswith(ENVELOPE_SOURCE_PREFIX)


def decoded_columns(source: Source) -> dict[str, str] | None:
    """Payload column -> upper-case type word, before transform; None if the DDL is
    too unusual to read without Spark (Spark's own parser then decides)."""
    if source.format == "string":
        return {"value": "STRING"}
    if source.format == "bytes":
        return {"value": "BINARY"}
    if source.format in REGISTRY_FORMATS:
        return None  # the reader schema is known at run time (registry) or to the Spark pass
    return ddl_columns(source.schema or "")


def ddl_columns(ddl: str) -> dict[str, str] | None:
    columns = {}
    for part in _top_level_split(ddl):
        match = re.fullmatch(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s*([A-Za-z_]+)\b.*", part,
                             re.DOTALL)
        if match is None:
            return None
        columns[match.group(1).strip("`")] = match.group(2).upper()
    return columns or None


def _top_level_split(ddl: str) -> list[str]:
    """Split on commas outside <...>, (...) and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, None
    for char in ddl:
        if quote:
            quote = None if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


# --- back to YAML ---------------------------------------------------------------


def to_document(pipeline: Pipeline) -> dict:
    """The pipeline as the contract's YAML mapping, defaults filled in: what
    `plan` shows, and what loads back into an equal Pipeline."""
    document = {
        "name": pipeline.name,
        "source": _source_document(pipeline.source),
        "transform": _drop_empty({"select": list(pipeline.transform.select),
                                  "where": pipeline.transform.where}) if pipeline.transform else None,
        "cdc": _cdc_document(pipeline.cdc),
        "uid": None if pipeline.cdc else _uid_document(pipeline.uid),
        "target": _target_document(pipeline.target, deletes_apply(pipeline)),
        "checkpoint": pipeline.checkpoint,
        "dead_letter": _drop_empty({"path": pipeline.dead_letter.path,
                                    "table": pipeline.dead_letter.table}),
        "trigger": _trigger_document(pipeline.trigger),
        "spark_conf": dict(pipeline.spark_conf),
        "schema_evolution": pipeline.schema_evolution,
    }
    return {**_drop_empty(document, keep=("spark_conf",)), **operations_spec.to_document(pipeline.operations)}


def deletes_apply(pipeline: Pipeline) -> bool:
    """Whether anything in this pipeline deletes: cdc changes, or tombstones in an upsert by key."""
    return pipeline.applies_deletes


def _source_document(source: Source) -> dict:
    registry = source.registry
    registry_document = None
    if registry is not None:
        tls = registry.tls
        registry_document = _drop_empty({
            "url": registry.url, "subject": registry.subject, "version": registry.version,
            "auth": _drop_empty({"basic": registry.basic, "bearer": registry.bearer}),
            "tls": _drop_empty({"ca": tls.ca, "cert": tls.cert, "key": tls.key}) if tls else None,
        })
    return _drop_empty({"kafka": _kafka_document(source.kafka), "format": source.format,
                        "schema": source.schema, "schemas": dict(source.schemas),
                        "registry": registry_document,
                        "schema_file": source.schema_file, "message": source.message})


def _kafka_document(kafka: KafkaSource) -> dict:
    starting = kafka.starting_offsets
    if not isinstance(starting, str):
        starting = {topic: dict(parts) for topic, parts in starting.items()}
    return _drop_empty({
        "bootstrap_servers": kafka.bootstrap_servers, "topics": list(kafka.topics),
        "pattern": kafka.pattern, "starting_offsets": starting,
        "max_offsets_per_trigger": kafka.max_offsets_per_trigger,
        "isolation_level": kafka.isolation_level, "allow_data_loss": kafka.allow_data_loss,
        "options": dict(kafka.options),
    }, keep=("options",))


def _cdc_document(cdc: Cdc | None) -> dict | None:
    if cdc is None:
        return None
    sequence = list(cdc.sequence) if isinstance(cdc.sequence, tuple) else cdc.sequence
    return _drop_empty({"format": cdc.format, "key": list(cdc.key), "sequence": sequence,
                        "encodings": dict(cdc.encodings)})


def _uid_document(uid: Uid) -> dict:
    value = {"header": uid.header, "field": uid.field, "fields": list(uid.fields),
             "coordinates": True, "key": True}[uid.kind]
    return {uid.kind: value}


def _target_document(target: Target, deletes_apply: bool = False) -> dict:
    horizon = target.dedup_horizon
    return _drop_empty({
        "path": target.path, "table": target.table, "mode": target.mode,
        "order_by": target.order_by, "partition_by": list(target.partition_by),
        "cluster_by": list(target.cluster_by),
        "dedup_horizon": {"column": horizon.column, "within": horizon.within} if horizon else None,
        "deletes": target.deletes if deletes_apply else None,
        "history": True if target.history else None,
    })


def _trigger_document(trigger: Trigger) -> dict:
    if trigger.processing_time:
        return {"processing_time": trigger.processing_time}
    return {"available_now": trigger.available_now}


def _drop_empty(values: dict, keep: tuple[str, ...] = ()) -> dict:
    return {key: value for key, value in values.items()
            if key in keep or value not in (None, [], {})}


def to_yaml(document: dict) -> str:
    """YAML text of a document; a literal ${ is written $${ so it loads back as is."""
    import yaml

    escaped = _escape_variables(document)
    return yaml.safe_dump(escaped, sort_keys=False, default_flow_style=None, allow_unicode=True,
                          width=100)


def _escape_variables(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _escape_variables(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_escape_variables(child) for child in value]
    if not isinstance(value, str):
        return value
    # a target template stays as written: it is the contract's spelling, not a variable
    return value.replace("${", "$${").replace("$" + template.TOPIC, template.TOPIC)
