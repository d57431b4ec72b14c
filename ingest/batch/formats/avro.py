"""Avro payloads -> Spark columns, decoded with fastavro inside an Arrow UDF.

Why not Spark's `from_avro`: it takes one fixed schema and knows nothing of the
registry's 5-byte framing, its jar (`spark-avro`) is not on Maven Central for
the pinned Spark 4.2.0, and Databricks serverless allows no JVM calls from
Python. fastavro over Arrow batches runs wherever PySpark runs.

Each record is read with its own writer schema (by the id in its frame) and
resolved to the reader schema by Avro's rules (defaults for fields the writer
lacks, promotions int -> long -> float -> double, ...). A record that cannot
be read is marked with the reason; it never raises.
"""

from __future__ import annotations

import io
import json
import struct
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Callable, cast
from uuid import UUID

from pyspark.sql import types as T

from ingest.batch.formats import wire
from ingest.batch.staged import NOT_FRAMED, NULL_VALUE, unknown_schema
from ingest.errors import UnsupportedSchema

PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType(), "fixed": T.BinaryType(),
    "enum": T.StringType(),
}
LOGICAL: dict[str, T.DataType] = {
    "date": T.DateType(), "timestamp-millis": T.TimestampType(), "timestamp-micros": T.TimestampType(),
    "local-timestamp-millis": T.TimestampNTZType(), "local-timestamp-micros": T.TimestampNTZType(),
    "uuid": T.StringType(), "time-millis": T.StringType(), "time-micros": T.StringType(),
}


# Debezium's AvroConverter marks its logical types with `connect.name` on plain longs, ints and
# records, not with Avro's logicalType: read by the name, as the JSON path reads them
_MICROS_PER = {"org.apache.kafka.connect.data.Timestamp": 1_000, "io.debezium.time.Timestamp": 1_000,
               "io.debezium.time.MicroTimestamp": 1, "io.debezium.time.NanoTimestamp": 0}
_TIMES = {"org.apache.kafka.connect.data.Time": 1_000, "io.debezium.time.Time": 1_000,
          "io.debezium.time.MicroTime": 1, "io.debezium.time.NanoTime": 0}
_DATES = ("org.apache.kafka.connect.data.Date", "io.debezium.time.Date")
_VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_TYPES: dict[str, T.DataType] = {
    **{name: T.TimestampType() for name in _MICROS_PER}, **{name: T.DateType() for name in _DATES},
    **{name: T.StringType() for name in _TIMES}, _VARIABLE_SCALE_DECIMAL: T.StringType()}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAX_DECIMAL_DIGITS = 38  # Spark's; Debezium writes precision 64 where the column has none


def parse(schema_text: str) -> dict:
    """A schema's JSON with every named type written out where it is used."""
    from fastavro import parse_schema

    try:
        return cast(dict, parse_schema(json.loads(schema_text), expand=True))
    except Exception as error:  # fastavro raises several kinds; all mean the same here
        raise UnsupportedSchema(f"not a valid Avro schema: {error}") from None


def spark_schema(reader: dict) -> T.StructType:
    """The reader schema (a record) as the payload's Spark columns."""
    if not isinstance(reader, dict) or reader.get("type") != "record":
        raise UnsupportedSchema("the reader schema is not an Avro record; expected a record "
                                "whose fields become the payload columns")
    return cast(T.StructType, spark_type(reader, ()))


def spark_type(schema: Any, seen: tuple[str, ...]) -> T.DataType:
    if isinstance(schema, list):
        return _union(schema, seen)
    if isinstance(schema, str):
        if schema not in PRIMITIVES:
            raise UnsupportedSchema(f"Avro type {schema!r} is not supported here")
        return PRIMITIVES[schema]
    if schema.get("connect.name") in CONNECT_TYPES:
        return CONNECT_TYPES[schema["connect.name"]]
    logical = schema.get("logicalType")
    if logical == "decimal":
        return T.DecimalType(min(int(schema["precision"]), _MAX_DECIMAL_DIGITS), int(schema.get("scale", 0)))
    if logical in LOGICAL:
        return LOGICAL[logical]
    kind = schema["type"]
    if kind == "record":
        name = schema.get("name", "")
        if name in seen:
            raise UnsupportedSchema(f"record {name} refers to itself; recursive records have no "
                                    "Spark type")
        return T.StructType([T.StructField(f["name"], spark_type(f["type"], seen + (name,)),
                                       _nullable(f["type"])) for f in schema["fields"]])
    if kind == "array":
        return T.ArrayType(spark_type(schema["items"], seen), _nullable(schema["items"]))
    if kind == "map":
        return T.MapType(T.StringType(), spark_type(schema["values"], seen), _nullable(schema["values"]))
    return spark_type(kind, seen)


def _union(branches: list, seen: tuple[str, ...]) -> T.DataType:
    others = [b for b in branches if b != "null"]
    if len(others) != 1:
        raise UnsupportedSchema(f"a union of {len(others)} non-null types has no single Spark "
                                "type; expected a type or [null, type]")
    return spark_type(others[0], seen)


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


# --- reading records -----------------------------------------------------------

class Reader:
    """Reads payloads with their writer schema resolved to the reader schema.

    `writers` maps schema id -> writer schema text, or None for an id the
    registry does not have. With `framed=False` (a schema_file) every record is
    plain Avro written with the reader schema itself.
    """

    def __init__(self, reader_text: str, writers: dict[int, str | None], framed: bool = True):
        self.reader = parse(reader_text)
        self.writer_texts = writers
        self.framed = framed
        self.fix = _fixer(self.reader)
        self._writers: dict[int, dict] = {}

    def read(self, value: bytes | None) -> tuple[dict | None, str | None]:
        """(record, None) or (None, why it could not be read)."""
        from fastavro import schemaless_reader

        if value is None:
            return None, NULL_VALUE
        if not self.framed:
            return self._read(schemaless_reader, value, self.reader, "the schema_file's schema")
        schema_id = wire.frame_id(value)
        if schema_id is None:
            return None, NOT_FRAMED
        writer = self._writer(schema_id)
        if writer is None:
            return None, unknown_schema(schema_id)
        return self._read(schemaless_reader, value[wire.HEADER:], writer, f"schema id {schema_id}")

    def _read(self, schemaless_reader, payload: bytes, writer: dict, which: str):
        data = io.BytesIO(payload)
        try:
            record = schemaless_reader(data, writer, self.reader)
        except Exception as error:  # truncated bytes, unresolvable schemas, bad unions...
            return None, _field_reason(payload, writer, self.reader, which) or \
                f"does not decode with {which}: {_short(error)}"
        if data.tell() != len(payload):
            return None, (f"does not decode with {which}: {len(payload) - data.tell()} "
                          "byte(s) left over after the record")
        try:
            return (self.fix(record) if self.fix else record), None
        except ValueError as error:  # a value its column cannot hold (a year outside 1-9999, ...)
            return None, f"does not decode with {which}: {error}"

    def _writer(self, schema_id: int) -> dict | None:
        if schema_id not in self._writers:
            text = self.writer_texts.get(schema_id)
            if text is None:
                return None
            self._writers[schema_id] = parse(text)
        return self._writers[schema_id]


def _field_reason(payload: bytes, writer: dict, reader: dict, which: str) -> str | None:
    """For a record that failed (only then: it reads the record again): the first reader
    field its writer's value cannot be read as, with the value as written; None when the
    failure is not one field's."""
    from fastavro import schemaless_reader

    try:
        written = schemaless_reader(io.BytesIO(payload), writer, None)
    except Exception:  # the bytes themselves are broken: no field to name
        return None
    found = _first_mismatch(writer, reader, written, ())
    if found is None:
        return None
    path, writer_type, reader_type, value = found
    if writer_type is None:
        return (f"field {path}: missing in {which} (the writer's record has no such field) and "
                f"the reader schema gives it no default")
    return (f"field {path}: value {_written(value)} ({_type_name(writer_type)} in {which}) cannot be "
            f"read as the reader schema's {_type_name(reader_type)}")


def _first_mismatch(writer: Any, reader: Any, value: Any, path: tuple[str, ...]):
    from fastavro._read_py import match_types

    writer, reader = _single(writer), _single(reader)
    if isinstance(writer, dict) and isinstance(reader, dict) and writer.get("type") == reader.get("type") == "record":
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            name = field["name"]
            inner = value.get(name) if isinstance(value, dict) else None
            if name not in written:
                if "default" not in field:
                    return ".".join(path + (name,)), None, field["type"], None
                continue
            found = _first_mismatch(written[name]["type"], field["type"], inner, path + (name,))
            if found is not None:
                return found
        return None
    if path and not match_types(writer, reader, {"writer": {}, "reader": {}}):
        return ".".join(path), writer, reader, value
    return None


def _single(schema: Any) -> Any:
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        return others[0] if len(others) == 1 else schema
    return schema


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("logicalType") or schema.get("name") or schema.get("type"))
    return str(schema)


def _written(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return f"'{text[:200]}'"


def _short(error: Exception) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, (EOFError, struct.error)) or "EOF" in text or "buffer" in text:
        return f"truncated record ({type(error).__name__}: {text})"[:300]
    return f"{type(error).__name__}: {text}"[:300]


# Arrow takes dates, datetimes, decimals, bytes and nested dicts/lists as fastavro
# gives them; only uuids and times need a change, so only their paths are walked.
def _fixer(schema: Any) -> Callable[[Any], Any] | None:
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        return _fixer(others[0]) if len(others) == 1 else None
    if not isinstance(schema, dict):
        return None
    if schema.get("logicalType") in ("uuid", "time-millis", "time-micros"):
        return _leaf_to_text
    connect = _connect_fixer(schema.get("connect.name"))
    if connect is not None:
        return connect
    if schema.get("logicalType") == "decimal" and int(schema.get("precision", 0)) > _MAX_DECIMAL_DIGITS:
        return _within_38_digits
    kind = schema.get("type")
    if kind == "record":
        fixes = {f["name"]: fix for f in schema["fields"] if (fix := _fixer(f["type"]))}
        if not fixes:
            return None
        return lambda record: record if record is None else {
            **record, **{name: _named(name, fix, record[name]) for name, fix in fixes.items()}}
    if kind == "array":
        fix = _fixer(schema["items"])
        return (lambda items: items if items is None else [fix(i) for i in items]) if fix else None
    if kind == "map":
        fix = _fixer(schema["values"])
        return (lambda values: values if values is None else
                {k: fix(v) for k, v in values.items()}) if fix else None
    return None


def _named(name: str, fix: Callable[[Any], Any], value: Any) -> Any:
    try:
        return fix(value)
    except ValueError as error:
        raise ValueError(f"column {name}: {error}") from None


def _connect_fixer(name: str | None) -> Callable[[Any], Any] | None:
    if name in _MICROS_PER:
        per = _MICROS_PER[name]
        return lambda v: v if v is None or isinstance(v, datetime) else _instant(v, per, name)
    if name in _TIMES:
        per = _TIMES[name]
        return lambda v: v if v is None or isinstance(v, str) else _time_of_day(v, per, name)
    if name in _DATES:
        return lambda v: v if v is None or isinstance(v, date) else _day(v, name)
    if name == _VARIABLE_SCALE_DECIMAL:
        return lambda v: v if v is None else str(Decimal(int.from_bytes(
            v["value"], "big", signed=True)).scaleb(-int(v["scale"])))
    return None


def _micros(value: int, per: int) -> int:
    """per: microseconds in the unit; 0 for nanoseconds (truncated to Spark's microseconds)."""
    return value // 1_000 if per == 0 else value * per


def _instant(value: int, per: int, name: str) -> datetime:
    try:
        return _EPOCH + timedelta(microseconds=_micros(value, per))
    except OverflowError:
        raise ValueError(f"value {value} is outside years 1-9999 as {name}") from None


def _time_of_day(value: int, per: int, name: str) -> str:
    micros = _micros(value, per)
    if not 0 <= micros <= 86_400_000_000:
        raise ValueError(f"value {value} is not a time of day as {name}")
    seconds, fraction = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _day(value: int, name: str) -> date:
    try:
        return date(1970, 1, 1) + timedelta(days=value)
    except OverflowError:
        raise ValueError(f"value {value} is outside years 1-9999 as {name}") from None


def _within_38_digits(value: Any) -> Any:
    if isinstance(value, Decimal) and len(value.as_tuple().digits) > _MAX_DECIMAL_DIGITS:
        raise ValueError(f"value {value} has more than {_MAX_DECIMAL_DIGITS} digits")
    return value


def _leaf_to_text(value: Any) -> Any:
    if isinstance(value, (UUID, time)):
        return value.isoformat() if isinstance(value, time) else str(value)
    return value
