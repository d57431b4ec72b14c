"""A change's row columns from the message itself: the Connect schema Debezium's JSON converter
puts in every message (`schemas.enable=true`, its default), for `cdc` with `format: json` and
no `source.schema`.

Each batch lists the distinct envelope schemas of each topic (a narrow aggregation: a topic's
messages share a handful of schema texts) and reads the row's columns from the `after` (or
`before`) field's schema, Connect's types mapped to the types `connect_types` converts into
(docs/cdc.md). They are merged with the columns the topic's table already has: a column the
table has keeps its place and type, a field the table lacks is a new column, which
`schema_evolution` then lets in or refuses as it would a declared one; a field whose type differs
from the table's (or between two of the batch's messages) is refused, naming the topic, the
field and both types, unless the table's type holds the message's exactly (an int32 into a
BIGINT) or `schema_evolution: widen` widens it.

The same aggregation lists each topic's message key schemas, from which `message_key` takes a
table's key columns where the YAML names none.

The same rule as Avro through the registry, where the writer schema of each message decides
and the reader schema is per topic (`<topic>-value`): here the schema comes with the message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingest.batch.formats import connect_types as C
from ingest.batch.formats.avro import CONNECT_TYPES
from ingest.batch.message_key import KeyFromMessages, key_row
from ingest.batch.schema_evolution import WIDEN, SchemaChangeRefused, widens
from ingest.errors import IngestError
from ingest.spec.columns import CHANGE_COLUMNS, INGEST_COLUMNS
from ingest.spec.model import Pipeline

PLAIN = {"int8": T.ByteType(), "int16": T.ShortType(), "int32": T.IntegerType(), "int64": T.LongType(),
         "float32": T.FloatType(), "float64": T.DoubleType(), "boolean": T.BooleanType(),
         "string": T.StringType(), "bytes": T.BinaryType()}
# Spark's DECIMAL holds 38 digits; Connect's Decimal may name none (or 64, where the column has none)
MAX_PRECISION = 38
# A VariableScaleDecimal is a STRING column of its exact text; the message's own schema names the
# encoding of the other fields (connect_types reads it per message), this one the column's type cannot
_TOLD = (C.VARIABLE_SCALE_DECIMAL,)
ENCODING = "connect.name"  # the StructField metadata key cdc.py reads as the column's encoding
_OWN_COLUMNS = {name.lower() for name in (*INGEST_COLUMNS, *CHANGE_COLUMNS)}


class NoRowSchema(IngestError):
    """A topic's columns come from its messages, and none of them (nor its table) gives them."""


class TopicSchemas(list):
    """A topic's distinct envelope schemas in a batch (the texts of `schema.fields`, sorted),
    and in `key_schemas` its message keys' (the text of the key's `schema.fields`);
    `tombstones_only`: no record of the topic has a value. A list of the envelope schemas, so
    what splits a batch's topics by table passes it on as it is."""

    def __init__(self, values: Iterable[str] = (), key_schemas: Iterable[str] = (),
                 tombstones_only: bool = False):
        super().__init__(sorted(values))
        self.key_schemas = sorted(key_schemas)
        self.tombstones_only = tombstones_only


def envelope_schemas(raw: DataFrame) -> dict[str, list[str]]:
    """Topic -> the distinct texts of its messages' envelope schemas and of their keys'
    schemas, a `TopicSchemas` (a topic whose messages carry none: empty): one small
    aggregation over the batch's keys and values."""
    text = F.get_json_object(F.col("value").cast("string"), "$.schema.fields")
    key = F.get_json_object(F.col("key").cast("string"), "$.schema.fields")
    rows = raw.groupBy("topic").agg(F.collect_set(text).alias("s"), F.collect_set(key).alias("k"),
                                    F.max(F.col("value").isNotNull()).alias("v")).collect()
    found: dict[str, list[str]] = {row.topic: TopicSchemas(row.s, row.k, tombstones_only=not row.v)
                                   for row in rows}
    return found


def row_columns(topic: str, schemas: list[str], table: T.StructType | None, policy: str) -> T.StructType:
    """The row's columns for `topic`'s batch: the table's payload columns, then each field of the
    messages' schemas the table lacks, in the order the schemas name them. A table's first batch
    of tombstones alone (no row schema, a key schema): the key's fields, the rest comes later."""
    columns: dict[str, T.StructField] = {}
    origin: dict[str, str] = {}
    for field in (table.fields if table is not None else []):
        if field.name.lower() not in _OWN_COLUMNS:
            columns[field.name.lower()] = T.StructField(field.name, field.dataType, True)
            origin[field.name.lower()] = "the table"
    for text in schemas:
        for name, kind, encoding in _image_fields(topic, text):
            key = name.lower()
            if key not in columns:
                columns[key] = T.StructField(name, kind, True, encoding)
                origin[key] = "a message of this batch"
                continue
            have = columns[key].dataType
            if _same(have, kind) or widens(kind, have):  # the column holds the message's values
                columns[key] = T.StructField(columns[key].name, have, True, encoding or columns[key].metadata)
                continue
            if policy == WIDEN and widens(have, kind):
                columns[key] = T.StructField(columns[key].name, kind, True, encoding)
                continue
            raise SchemaChangeRefused(
                f"topic {topic}: field {name} is {kind.simpleString()} in a message's schema and "
                f"{have.simpleString()} in {origin[key]}; a column's type may not change"
                f"{'' if policy == WIDEN else ' (schema_evolution: widen takes a wider type)'}; "
                "nothing of this batch was written")
    if not columns and getattr(schemas, "tombstones_only", False):
        for part in key_row(getattr(schemas, "key_schemas", ())):
            name = part["field"]
            columns[name.lower()] = T.StructField(name, spark_type(part, f"topic {topic}: key field {name}"), True)
    if not columns:
        raise NoRowSchema(
            f"topic {topic}: its columns come from its messages (cdc with format json and no "
            "source.schema), but no message of the batch carries a schema and its table does not "
            "exist yet; expected Debezium's JSON converter with schemas.enable=true (its default), "
            "or a source.schema (source.schemas for a topic of its own)")
    return T.StructType(list(columns.values()))


def _image_fields(topic: str, text: str) -> list[tuple[str, T.DataType, dict]]:
    """(name, Spark type, the field's metadata) of the row image's fields in one envelope schema:
    the metadata names an encoding the Spark type alone does not tell (ENCODING)."""
    try:
        fields = json.loads(text)
    except ValueError:
        return []
    images = {f.get("field"): f for f in fields if isinstance(f, dict)} if isinstance(fields, list) else {}
    image = images.get("after") or images.get("before")
    if not isinstance(image, dict) or not isinstance(image.get("fields"), list):
        return []
    return [(f["field"], spark_type(f, f"topic {topic}: field {f['field']}"),
             {ENCODING: f["name"]} if f.get("name") in _TOLD else {})
            for f in image["fields"] if isinstance(f, dict) and isinstance(f.get("field"), str)]


def spark_type(schema: dict, where: str) -> T.DataType:
    """A Connect field schema's Spark type, as docs/cdc.md maps Debezium's encodings."""
    name, kind = schema.get("name"), schema.get("type")
    parameters = schema.get("parameters") or {}
    if name == C.DECIMAL:
        precision = int(parameters.get("connect.decimal.precision", MAX_PRECISION))
        scale = int(parameters.get("scale", 0))
        return T.DecimalType(min(max(precision, scale, 1), MAX_PRECISION), scale)
    if name in CONNECT_TYPES:  # the names whose type is not their plain type's, as the Avro path maps them
        return CONNECT_TYPES[name]
    if kind in PLAIN:
        return PLAIN[kind]
    if kind == "struct":
        return T.StructType([T.StructField(f["field"], spark_type(f, f"{where}.{f['field']}"), True)
                             for f in schema.get("fields") or []])
    if kind == "array":
        return T.ArrayType(spark_type(schema.get("items") or {}, f"{where}[]"), True)
    if kind == "map":
        return T.MapType(spark_type(schema.get("keys") or {}, f"{where} keys"),
                         spark_type(schema.get("values") or {}, f"{where} values"), True)
    raise SchemaChangeRefused(f"{where}: Connect type {kind!r} (name {name!r}) has no Spark type; "
                              "expected a source.schema naming the column's type")


def _same(one: T.DataType, other: T.DataType) -> bool:
    return one.simpleString() == other.simpleString()


def columns_of(session, pipeline, envelopes: dict[str, list[str]]) -> T.StructType | None:
    """The row's columns of a batch (or a whole topic) with these envelope schemas per topic:
    the target's, then each topic's messages' fields; None for a batch without a record (a
    range of aborted transactions) before the table exists."""
    from ingest.batch.merge.target import target_schema
    from ingest.platform.delta import table_exists

    # with a transform the table holds its output, not the row: the messages alone say the row
    # (a changed type is then refused by schema_evolution at the MERGE, naming the column)
    merged = pipeline.transform is None and table_exists(session, pipeline.target)
    row = target_schema(session, pipeline.target) if merged else None
    for topic in sorted(envelopes):
        row = row_columns(topic, envelopes[topic], row, pipeline.schema_evolution)
    return row


@dataclass
class RowFromMessages:
    """A processor's row columns from batch to batch: derived again only when a batch brings an
    envelope schema not taken in before (the target is read then, not for every batch); and its
    key (`message_key`)."""

    pipeline: Pipeline
    _row: T.StructType | None = None
    _taken: frozenset = frozenset()
    _key: KeyFromMessages | None = None

    def row(self, session, batch: DataFrame, envelopes: dict[str, list[str]] | None = None) -> T.StructType | None:
        if envelopes is None:
            envelopes = envelope_schemas(batch)
        seen = frozenset(text for texts in envelopes.values() for text in texts)
        if self._row is not None and seen <= self._taken and all(envelopes.values()):
            return self._row
        self._row, self._taken = columns_of(session, self.pipeline, envelopes), self._taken | seen
        return self._row

    def keyed(self, session, pipeline: Pipeline, envelopes: dict[str, list[str]], row: T.StructType) -> Pipeline:
        """`pipeline` with this batch's key columns (cdc.key where the YAML names them, else
        the message keys' schemas'), or why not, before anything of the batch is written."""
        if self._key is None:
            self._key = KeyFromMessages(self.pipeline)
        key_schemas = {topic: getattr(texts, "key_schemas", []) for topic, texts in envelopes.items()}
        return self._key.keyed(session, pipeline, key_schemas, row)
