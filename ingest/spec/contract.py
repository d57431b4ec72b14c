"""The contract, key by key: the resolved YAML tree checked against what a pipeline
may say, every problem collected on the `Check`, and the frozen `Pipeline` built
when there was none. The source section is in `contract_source`; the column checks
in `columns`."""

from __future__ import annotations

import re
from typing import Any

from ingest.spec import operations as operations_spec
from ingest.spec import properties as table_properties
from ingest.spec import template
from ingest.spec.columns import ENVELOPE_SOURCE_PREFIX, check_columns
from ingest.spec.contract_source import check_source
from ingest.spec.model import (
    CDC_ENCODINGS,
    CDC_FORMATS,
    DELETES,
    MODES,
    SCHEMA_EVOLUTIONS,
    UID_KINDS,
    Cdc,
    DeadLetter,
    DedupHorizon,
    Pipeline,
    Source,
    Target,
    Transform,
    Trigger,
    Uid,
    cdc_uid,
    frozen_map,
)
from ingest.spec.values import Check, one_of, parse_duration

TOP_KEYS = ("name", "source", "transform", "uid", "target", "checkpoint", "dead_letter",
            "trigger", "spark_conf", "cdc", "schema_evolution") + operations_spec.TOP_KEYS
TRANSFORM_KEYS = ("select", "where")
TARGET_KEYS = ("path", "table", "mode", "order_by", "partition_by", "cluster_by", "dedup_horizon",
               "deletes", "history", "properties")
CDC_KEYS = ("format", "key", "sequence", "encodings")
HORIZON_KEYS = ("column", "within")
DEAD_LETTER_KEYS = ("path", "table", "max_share", "properties")
TRIGGER_KEYS = ("available_now", "processing_time")

NAME = re.compile(r"[a-z][a-z0-9_]*")
IDENTIFIER = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)"
TABLE_NAME = re.compile(rf"{IDENTIFIER}(?:\.{IDENTIFIER}){{0,2}}")


def build(c: Check, raw: Any) -> Pipeline | None:
    """Check the resolved tree against the contract; the Pipeline if nothing is wrong."""
    top = c.root(raw, TOP_KEYS, "a pipeline: a mapping with name, source, uid, target and checkpoint")
    if top is None:
        return None
    name = _name(c, top)
    source = check_source(c, top)
    transform = _transform(c, top.get("transform"))
    cdc = _cdc(c, top.get("cdc"), _columns_from_messages(top))
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
        check_columns(c, source, transform, uid, target, cdc)
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
    properties = table_properties.check(c, "target", target.get("properties"), updates=mode == "upsert")
    if horizon is not None and mode == "upsert":
        c.add("exclusive_keys", "target.dedup_horizon", "dedup_horizon is given with mode upsert: an "
              "update may move the horizon column by more than `within`, and the next version of that "
              "row would not be found and be inserted as a second row; expected dedup_horizon only "
              "with mode insert_only")
    if c.failed(mark):
        return None
    return Target(path, table, mode, order_by, tuple(partition_by or ()), tuple(cluster_by or ()),
                  horizon, deletes, bool(history), frozen_map(properties))


def _columns_from_messages(top: dict) -> bool:
    """cdc with format json and no schema for any topic: every table's columns, and so its key,
    may come from the messages (`Pipeline.columns_from_messages`, for each topic)."""
    source = top.get("source")
    if not isinstance(source, dict):
        return False
    return ((source.get("format") or "json") == "json" and source.get("schema") is None
            and not source.get("schemas"))


def _cdc(c: Check, raw: Any, columns_from_messages: bool = False) -> Cdc | None:
    """`columns_from_messages`: cdc.key may be omitted; each table's key is then the fields of
    its message key's schema (`batch/message_key.py`)."""
    values = c.mapping("cdc", raw, CDC_KEYS) if raw is not None else None
    if values is None:
        return None
    mark = c.mark()
    fmt = c.enum("cdc.format", values.get("format"), CDC_FORMATS, "a change data capture format",
                 default="debezium")
    expected = "a list of the row's key columns, e.g. [id]"
    given = values.get("key") if columns_from_messages and "key" not in values \
        else c.need(values, "cdc", "key", expected)
    key = c.texts("cdc.key", given, expected, non_empty=True, unique=True, item="a column name")
    sequence = _cdc_sequence(c, values.get("sequence"))
    encodings = _cdc_encodings(c, values.get("encodings"))
    if c.failed(mark) or not (key or columns_from_messages and "key" not in values):
        return None
    return Cdc(tuple(key or ()), fmt, sequence, frozen_map(encodings))


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
    return cdc_uid(cdc.key)


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
    values = c.mapping("dead_letter", raw, DEAD_LETTER_KEYS) if raw is not None else {}
    if values is None:
        return None
    max_share = _max_share(c, values.get("max_share"))
    properties = frozen_map(table_properties.check(c, "dead_letter", values.get("properties"), updates=True))
    if values.get("path") is None and values.get("table") is None and not any(
            c.misspelt(f"dead_letter.{key}") for key in ("path", "table")):
        if target is None:
            return None
        # contract default: next to the target, with a _dead_letter suffix
        if target.path is not None:
            return DeadLetter(path=f"{target.path}_dead_letter", properties=properties, max_share=max_share)
        return DeadLetter(table=f"{target.table}_dead_letter", properties=properties, max_share=max_share)
    path, table = _location(c, "dead_letter", values)
    dead_letter = DeadLetter(path, table, properties, max_share)
    if target is not None and dead_letter.location == target.location:
        c.add("bad_value", "dead_letter", f"{dead_letter.location!r} is the target itself; "
              "expected a table of its own for dead letters")
    return dead_letter


def _max_share(c: Check, value: Any) -> float | None:
    path = "dead_letter.max_share"
    if value is None:
        return None
    if isinstance(value, str) and path in c.from_vars:
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        shown = repr(value) if isinstance(value, str) else value
        c.add("bad_value", path, f"{shown} is not a share of a batch; expected a number from 0 up to "
              "(not including) 1, e.g. 0.5: a batch with a larger share of dead letters fails the run")
        return None
    return float(value)


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

