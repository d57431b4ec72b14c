"""Debezium change envelopes -> one row per change: the row's columns, `_op` and `_sequence`.

The envelope is `{before, after, op, ts_ms, source}`, alone or inside Debezium's
`{schema, payload}` wrapper (the JSON converter with `schemas.enable=true`);
both are read with one parse. With `source.format: avro` the envelope is
Debezium's Avro envelope record in the Confluent wire format (the AvroConverter
with a schema registry), decoded by `schema_decode.SchemaDecoder` with the
reader schema; the row is the type of its `after` field, and `source`'s
fields become the same map of text the JSON path reads. `c`, `r` (snapshot read) and `u` carry the row in
`after`; `d` carries it (at least its key) in `before`. `source` is read as a
map of strings, so any connector's fields (`lsn`, `file`, `pos`, ...) can name
the sequence.

A change that cannot be applied is a `decode` dead letter whose reason names
the field; the tombstone Debezium sends after a delete is that delete again,
so it is counted as `filtered` (reason `tombstone`), never a dead letter.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType

from ingest.batch.formats.connect_types import Field, Parts, convert
from ingest.batch.formats.schemas import SchemaUnavailable
from ingest.batch.staged import RAW, RAW_FIELDS, REASON, STAGE
from ingest.spec.columns import DELETE, OP, SEQUENCE
from ingest.spec.model import Cdc

OPS = ("c", "r", "u", "d")
TOMBSTONE_REASON = "tombstone (a key with a null value): the delete before it again, a no-op"
_CORRUPT = "__corrupt"
_UNPARSED = "__unparsed"
_ROW_SCHEMA = "__row_schema"
_IMAGE, _TOMBSTONE, _SEQUENCE = "__image", "__tombstone", "__sequence"
_LEGACY_TOMBSTONE = r'^\s*\{\s*"schema"\s*:\s*null\s*,\s*"payload"\s*:\s*null\s*\}\s*$'


class EnvelopeSchemaError(SchemaUnavailable):
    """The Avro reader schema is not a change envelope: the run stops before a batch, exit 2."""


def decode_envelope(raw: DataFrame, cdc: Cdc, row, from_messages: bool = False) -> DataFrame:
    """Columns RAW, STAGE, REASON, the row's columns, `_sequence`, `_op`. `row` is the
    row's StructType (json), or the run's `SchemaDecoder` of the envelope (avro).
    `from_messages`: the columns came from the messages' schemas (`message_columns`), so a
    message without one (a bare payload) is a dead letter: nothing says its encodings."""
    with_raw = raw.select(F.struct(*[F.col(c) for c in RAW_FIELDS]).alias(RAW))
    if not isinstance(row, StructType):
        return _avro_envelope(with_raw, cdc, row)
    return _in_steps(with_raw, json_steps(_decoding(cdc, row, from_messages)))


def _avro_envelope(with_raw: DataFrame, cdc: Cdc, decoder) -> DataFrame:
    row = envelope_row(decoder.columns)
    decoded = decoder.decode(with_raw, RAW, "__decode_stage", "__decode_reason")
    source_type = decoder.columns["source"].dataType if "source" in decoder.columns.names else None
    source = (F.map_from_entries(F.array(*[
        F.struct(F.lit(f.name).alias("key"), F.col(f"source.`{f.name}`").cast("string").alias("value"))
        for f in source_type.fields if not isinstance(f.dataType, (StructType, ArrayType, MapType))]))
        if isinstance(source_type, StructType) else F.lit(None).cast(MapType(StringType(), StringType())))
    envelope = decoded.select(RAW, F.col("__decode_reason").alias("__unreadable"), F.struct(
        F.col("before"), F.col("after"), F.col("op").cast("string").alias("op"),
        (F.col("ts_ms").cast("bigint") if "ts_ms" in decoder.columns.names
         else F.lit(None).cast("bigint")).alias("ts_ms"),
        source.alias("source")).alias("e"))
    return _in_steps(envelope, _avro_steps(_decoding(cdc, row)))


# What turns a batch's envelopes into changes, as the steps below build it, is the same for every
# batch of a run: built once (thousands of calls into the JVM for a few columns), for each JVM
# this process talks to (Spark Connect: none). A whole database in one job has a row per table:
# kept for a thousand, so a batch of 50 tables changing does not build 50 again (16 did).
_BUILT_FOR = 1024


@dataclass(frozen=True)
class _Decoding:
    text: str  # what the steps depend on: the key
    cdc: Cdc = field(compare=False)
    row: StructType = field(compare=False)
    from_messages: bool = field(default=False, compare=False)


def _decoding(cdc: Cdc, row: StructType, from_messages: bool = False) -> _Decoding:
    from pyspark import SparkContext

    return _Decoding(f"{cdc!r} {row.json()} {from_messages} {id(SparkContext._gateway)}", cdc, row,
                     from_messages)


@functools.lru_cache(maxsize=_BUILT_FOR)
def json_steps(decoding: _Decoding) -> list:
    """The steps from a JSON envelope to its change, kept per row (bench/studies/many_topics.py
    runs main's 16 kept in their place)."""
    row = decoding.row
    parse = [RAW, F.from_json(F.col(f"{RAW}.value").cast("string"), _parse_schema(row),
                              {"columnNameOfCorruptRecord": _CORRUPT}).alias("p")]
    envelope = [RAW, F.col("p").isNull().alias(_UNPARSED), F.col(f"p.{_CORRUPT}").alias(_CORRUPT),
                _unwrapped().alias("e"), _row_schema().alias(_ROW_SCHEMA)]
    unreadable = [(F.col(_UNPARSED), F.lit("not a JSON object")),
                  (F.col(_CORRUPT).isNotNull(),
                   F.lit("malformed JSON or a value of the wrong type for the envelope"))]
    if decoding.from_messages:
        unreadable.append((F.col(_ROW_SCHEMA).isNull(), F.format_string(
            "no schema in the message: topic %s takes its columns and their encodings from each "
            "message's schema (Debezium's JSON converter with schemas.enable=true); expected "
            "{schema, payload}, or a source.schema for the topic", F.col(f"{RAW}.topic"))))
    return [parse, envelope, *_change_steps(decoding.cdc, row, unreadable, typed=True)]


@functools.lru_cache(maxsize=_BUILT_FOR)
def _avro_steps(decoding: _Decoding) -> list:
    return _change_steps(decoding.cdc, decoding.row,
                         [(F.col("__unreadable").isNotNull(), F.col("__unreadable"))])


def _in_steps(df: DataFrame, steps: list) -> DataFrame:
    """A list of columns is a select, a dict adds its columns to the step before."""
    for step in steps:
        df = df.withColumns(step) if isinstance(step, dict) else df.select(*step)
    return df


def envelope_row(columns: StructType) -> StructType:
    """The row inside an Avro envelope: the type of `after` (and `before`)."""
    fields = {f.name: f.dataType for f in columns.fields}
    row = fields.get("after")
    if not isinstance(row, StructType) or "op" not in fields or "before" not in fields:
        raise EnvelopeSchemaError(
            "the reader schema is not a Debezium change envelope; expected a record with fields "
            f"before, after (the row, a record), op, ts_ms and source, found {', '.join(fields) or 'none'}")
    return row


def _change_steps(cdc: Cdc, row: StructType, unreadable: list, typed: bool = False) -> list:
    """From RAW and the envelope `e`: the change's row, op and sequence, or why not. `typed`:
    the image holds each column's JSON text, converted here by its Connect encoding.

    In steps, each naming what the next reads (the image, each column's value and reason,
    the sequence, the reason): written as one expression, each part was copied wherever a
    later part used it, and Spark analyzed and optimized the copies again for every batch
    (a row of three columns was a tree of 7,000 nodes)."""
    op = F.col("e.op")
    image = F.when(op == DELETE, F.col("e.before")).otherwise(F.col("e.after"))
    value_of = {f.name: f"__value_{n}" for n, f in enumerate(row.fields)}
    steps: list = [{_IMAGE: image, _TOMBSTONE: is_tombstone()}]
    if typed:
        steps.append({_described(n): _schema_of(f.name) for n, f in enumerate(row.fields)})
        parts = Parts("__part_")
        # a column from the messages' schemas may carry its encoding (message_columns.ENCODING)
        converted = [convert(_field(n, f.name), f.dataType,
                             cdc.encodings.get(f.name) or f.metadata.get("connect.name"), parts)
                     for n, f in enumerate(row.fields)]
        steps.extend(parts.steps)
        column_reasons = [f"__column_reason_{n}" for n in range(len(row.fields))]
        steps.append({**{value_of[f.name]: c.value for f, c in zip(row.fields, converted, strict=True)},
                      **dict(zip(column_reasons, (c.reason for c in converted), strict=True))})
    else:
        steps.append({value_of[f.name]: F.col(_IMAGE)[f.name] for f in row.fields})
        column_reasons = []
    steps.append({_SEQUENCE: sequence_column(cdc, row, {n: F.col(v) for n, v in value_of.items()})})
    steps.append({REASON: _failure(cdc, row, F.col(_SEQUENCE), unreadable, [F.col(r) for r in column_reasons])})
    stage = (F.when(F.col(_TOMBSTONE), F.lit("filtered"))
             .when(F.col(REASON).isNotNull(), F.lit("decode")))
    steps.append([RAW, stage.alias(STAGE), REASON, *[F.col(value_of[f.name]).alias(f.name) for f in row.fields],
                  F.col(_SEQUENCE).alias(SEQUENCE), op.alias(OP)])
    return steps


def is_tombstone(value: Column | None = None) -> Column:
    """A null value, or the JSON converter's tombstone from before KAFKA-3832
    (`{"schema":null,"payload":null}`): the delete before it again."""
    value = F.col(f"{RAW}.value") if value is None else value
    return value.isNull() | value.cast("string").rlike(_LEGACY_TOMBSTONE)


def _row_schema() -> Column:
    """The `{schema, payload}` wrapper's fields of `after` (or `before`): each column's type,
    logical name and parameters; null without the wrapper."""
    fields = F.col("p.schema.fields")

    def image_fields(name: str) -> Column:
        return F.get(F.filter(fields, lambda f: f["field"] == name), 0)["fields"]
    return F.coalesce(image_fields("after"), image_fields("before"))


def _described(n: int) -> str:
    return f"__described_{n}"


def _schema_of(name: str) -> Column:
    """What the wrapper's schema says of the column: its type, logical name, parameters."""
    return F.get(F.filter(F.col(_ROW_SCHEMA), lambda f: f["field"] == name), 0)


def _field(n: int, name: str) -> Field:
    described = F.col(_described(n))
    return Field(name, F.col(_IMAGE)[name], described["name"], described["type"],
                 F.try_element_at(described["parameters"], F.lit("scale")), F.col("e.source")["connector"])


def _envelope_fields(row: StructType) -> list[StructField]:
    # every column as its JSON text: connect_types converts it by its encoding
    nullable_row = StructType([StructField(f.name, StringType(), True) for f in row.fields])
    return [StructField("before", nullable_row), StructField("after", nullable_row),
            StructField("op", StringType()), StructField("ts_ms", LongType()),
            StructField("source", MapType(StringType(), StringType()))]


def _parse_schema(row: StructType) -> StructType:
    fields = _envelope_fields(row)
    described = StructType([StructField("field", StringType()), StructField("type", StringType()),
                            StructField("name", StringType()),
                            StructField("parameters", MapType(StringType(), StringType()))])
    schema = StructType([StructField("fields", ArrayType(StructType([
        StructField("field", StringType()), StructField("fields", ArrayType(described))])))])
    return StructType([*fields, StructField("payload", StructType(fields)),
                       StructField("schema", schema), StructField(_CORRUPT, StringType())])


def _unwrapped() -> Column:
    """The envelope inside `payload` when there is one, else the record itself."""
    bare = F.struct(*[F.col(f"p.{name}").alias(name)
                      for name in ("before", "after", "op", "ts_ms", "source")])
    return F.when(F.col("p.payload").isNotNull(), F.col("p.payload")).otherwise(bare)


def sequence_column(cdc: Cdc, row: StructType, values: dict[str, Column]) -> Column:
    """The change's order: an envelope path (integers) or a row column (its own type); a list
    of them as a struct, which Spark compares field by field."""
    if cdc.sequence is None:
        return connector_position()
    if isinstance(cdc.sequence, str):
        return _sequence_item(cdc.sequence, values, whole_numbers=True)
    items = [_sequence_item(name, values, whole_numbers=False) for name in cdc.sequence]
    # only the first item must be present: SQL Server's snapshot reads have a commit_lsn but
    # neither change_lsn nor event_serial_no (a null field sorts first)
    return F.when(items[0].isNotNull(), F.struct(*[item.alias(f"_{n + 1}") for n, item in enumerate(items)]))


def _sequence_item(name: str, values: dict[str, Column], whole_numbers: bool) -> Column:
    if name == "ts_ms":
        return F.col("e.ts_ms")
    if not name.startswith("source."):
        return values[name]
    text = F.col("e.source")[name[len("source."):]]
    if whole_numbers:  # not a whole number (a hex LSN, above BIGINT): a null sequence, the decode dead letter
        return text.try_cast("bigint")
    # in a list, a field that is not a whole number orders as text: SQL Server's LSNs are
    # fixed-width hex ("00000027:00000758:0003"), so their text order is their log order
    return F.when(text.isNotNull(), F.struct(text.try_cast("bigint").alias("number"), text.alias("text")))


# The default order, by `source.connector`: each connector's own position in its log, packed
# into one BIGINT (the `_sequence` column), the same in an event re-sent after a restart. The
# processing clock `ts_ms` orders only a source without a known connector.
CONNECTOR_ORDERS = {
    "postgresql": "source.lsn",
    "mysql": "source.file (its number), source.pos, source.row",
    "sqlserver": "source.change_lsn (a snapshot's commit_lsn)",
    "oracle": "source.scn",
    "mongodb": "source.ts_ms (seconds), source.ord",
}
_MYSQL_POS_BITS, _MYSQL_ROW_BITS, _MYSQL_FILE_BITS = 31, 12, 20  # 63 bits
_MONGO_ORD_BITS = 32


def connector_position() -> Column:
    """The change's position in its connector's log as one BIGINT; null where a known connector's
    fields are missing or too large to pack (set cdc.sequence then)."""
    source = F.col("e.source")
    connector = source["connector"]
    mysql_file = F.regexp_extract(source["file"], r"\.([0-9]+)$", 1).try_cast("bigint")
    pos, row = source["pos"].try_cast("bigint"), F.coalesce(source["row"].try_cast("bigint"), F.lit(0))
    mysql = F.when(mysql_file.between(0, 2 ** _MYSQL_FILE_BITS - 1)
                   & pos.between(0, 2 ** _MYSQL_POS_BITS - 1) & row.between(0, 2 ** _MYSQL_ROW_BITS - 1),
                   F.shiftleft(mysql_file, _MYSQL_POS_BITS + _MYSQL_ROW_BITS)
                   + F.shiftleft(pos, _MYSQL_ROW_BITS) + row)
    # SQL Server's LSN is three hex parts, VLF:block:slot (8:8:4 digits): 15, 32 and 16 bits
    # a snapshot's read has no change_lsn, only the commit_lsn the snapshot was taken at
    lsn_parts = F.split(F.coalesce(source["change_lsn"], source["commit_lsn"]), ":")
    vlf = F.conv(F.get(lsn_parts, 0), 16, 10).try_cast("bigint")
    block = F.conv(F.get(lsn_parts, 1), 16, 10).try_cast("bigint")
    slot = F.conv(F.get(lsn_parts, 2), 16, 10).try_cast("bigint")
    sqlserver = F.when((F.size(lsn_parts) == 3) & vlf.between(0, 2 ** 15 - 1)
                       & block.between(0, 2 ** 32 - 1) & slot.between(0, 2 ** 16 - 1),
                       F.shiftleft(vlf, 48) + F.shiftleft(block, 16) + slot)
    seconds = F.floor(source["ts_ms"].try_cast("bigint") / 1000)
    ordinal = source["ord"].try_cast("bigint")
    mongodb = F.when(seconds.between(0, 2 ** 31 - 1) & ordinal.between(0, 2 ** _MONGO_ORD_BITS - 1),
                     F.shiftleft(seconds, _MONGO_ORD_BITS) + ordinal)
    return (F.when(connector == "mysql", mysql)
            .when(connector == "sqlserver", sqlserver)
            .when(connector == "oracle", source["scn"].try_cast("bigint"))
            .when(connector == "mongodb", mongodb)
            .otherwise(F.coalesce(source["lsn"].try_cast("bigint"), F.col("e.ts_ms"))))


def sequence_name(cdc: Cdc) -> str:
    """How the sequence is named in reasons, docs and `ingest plan`."""
    if isinstance(cdc.sequence, tuple):
        return ", then ".join(cdc.sequence) + " (compared in turn; a missing later item first)"
    return cdc.sequence or ("the connector's position by source.connector: " + "; ".join(
        f"{connector} {order}" for connector, order in CONNECTOR_ORDERS.items())
        + "; otherwise source.lsn, else ts_ms")


def _failure(cdc: Cdc, row: StructType, sequence: Column, unreadable: list,
             column_reasons: list[Column]) -> Column:
    """Why a change cannot be applied, naming the field; null when it can."""
    op = F.col("e.op")
    checks = [
        *unreadable,
        (op.isNull(), F.lit("missing field 'op'; expected c, r, u or d")),
        (~op.isin(*OPS), F.format_string("unknown op '%s' in field 'op'; expected c, r, u or d", op)),
        ((op == DELETE) & F.col("e.before").isNull(),
         F.lit("delete (op 'd') without 'before': the key is missing")),
        ((op != DELETE) & F.col("e.after").isNull(),
         F.format_string("op '%s' without 'after': the row is missing", op)),
    ]
    for key in cdc.key:
        checks.append(((op == DELETE) & F.col("e.before")[key].isNull(),
                       F.lit(f"delete (op 'd') without the key: before.{key} is null")))
        checks.append(((op != DELETE) & F.col("e.after")[key].isNull(),
                       F.format_string(f"op '%s' without the key: after.{key} is null", op)))
    checks.extend((reason.isNotNull(), reason) for reason in column_reasons)
    checks.append((sequence.isNull(), _null_sequence(cdc)))
    reason = F.lit(None).cast("string")
    for failed, why in reversed(checks):
        reason = F.when(failed, why).otherwise(reason)
    return F.when(~F.col(_TOMBSTONE), reason).otherwise(F.lit(TOMBSTONE_REASON))


def _null_sequence(cdc: Cdc) -> Column:
    if isinstance(cdc.sequence, tuple):
        return F.lit(f"null sequence: {cdc.sequence[0]}, the first item of cdc.sequence, is missing")
    if cdc.sequence is not None:
        return F.lit(f"null sequence: {cdc.sequence} is missing or not a whole number"
                     if _envelope(cdc) else f"null sequence: {cdc.sequence} is null")
    connector = F.col("e.source")["connector"]
    reason = F.lit("null sequence: source.lsn (or ts_ms where there is no lsn) is missing or not a "
                   "whole number")
    for name, order in CONNECTOR_ORDERS.items():
        if name != "postgresql":
            reason = F.when(connector == name, F.lit(
                f"null sequence: the {name} connector's position ({order}) is missing or does not "
                "fit a BIGINT; name the order in cdc.sequence")).otherwise(reason)
    return reason


def _envelope(cdc: Cdc) -> bool:
    return not isinstance(cdc.sequence, str) or cdc.sequence == "ts_ms" or cdc.sequence.startswith("source.")
