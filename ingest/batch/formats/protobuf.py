"""Protobuf payloads -> Spark columns, read with protobuf's Python runtime in an Arrow UDF.

A framed record is magic byte 0, the 4-byte schema id, the message indexes
(zigzag varints; one 0 byte for the file's first message), then the message.
Protobuf resolves versions by field number, so a record is parsed with the
reader's message class: fields the reader lacks are skipped, fields the writer
lacks take their defaults. The writer schema (by id) says which message the
record is; a record of another message type, an unknown id or bytes that do
not parse are dead letters naming the schema id.

Schemas travel as serialized FileDescriptorProtos: the registry's
`format=serialized`, or a local .proto compiled once on the driver
(`spec.proto_file`), so executors need no protoc.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import types as T

from ingest.batch.formats import wire
from ingest.batch.staged import NOT_FRAMED, NULL_VALUE, unknown_schema
from ingest.errors import UnsupportedSchema

# FieldDescriptor.TYPE_* -> Spark type
SCALARS: dict[int, T.DataType] = {
    1: T.DoubleType(), 2: T.FloatType(), 3: T.LongType(), 4: T.DecimalType(20, 0), 5: T.IntegerType(),
    6: T.DecimalType(20, 0), 7: T.LongType(), 8: T.BooleanType(), 9: T.StringType(), 12: T.BinaryType(),
    13: T.LongType(), 14: T.StringType(), 15: T.IntegerType(), 16: T.LongType(), 17: T.IntegerType(),
    18: T.LongType(),
}
TYPE_MESSAGE, TYPE_ENUM = 11, 14
WRAPPERS = {f"google.protobuf.{name}Value" for name in
            ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}
TIMESTAMP = "google.protobuf.Timestamp"
BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")


@dataclass(frozen=True)
class ProtoSchema:
    """One schema as the registry holds it: its file and the files it imports, serialized."""

    files: tuple[bytes, ...]  # dependencies first, the schema's own file last

    @property
    def file(self):
        from google.protobuf import descriptor_pb2

        return descriptor_pb2.FileDescriptorProto.FromString(self.files[-1])


def from_registry_text(text: str) -> bytes:
    """The registry's `format=serialized` text (base64) as FileDescriptorProto bytes."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise UnsupportedSchema("the registry gave the schema as .proto text, not serialized; "
                                  "expected a registry that answers format=serialized") from None


def pool_of(schema: ProtoSchema):
    """A descriptor pool with the schema's files, and the well-known types it imports."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    _import_well_known_types()
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    for data in schema.files:
        for name in descriptor_pb2.FileDescriptorProto.FromString(data).dependency:
            _add_builtin(pool, name, added)
        name = descriptor_pb2.FileDescriptorProto.FromString(data).name
        if name not in added:
            pool.AddSerializedFile(data)
            added.add(name)
    return pool


def _add_builtin(pool, name: str, added: set[str]) -> None:
    from google.protobuf import descriptor_pool

    if name in added or not name.startswith(BUILTIN_PREFIXES):
        return
    try:
        builtin = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        return  # not a file this runtime knows: the reference must bring it
    for dependency in builtin.dependencies:
        _add_builtin(pool, dependency.name, added)
    pool.AddSerializedFile(builtin.serialized_pb)
    added.add(name)


def _import_well_known_types() -> None:
    from google.protobuf import (  # noqa: F401 (imported for their descriptors)
        any_pb2,
        duration_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )


def message_name(schema: ProtoSchema, indexes: list[int]) -> str:
    """The full name of the message at `indexes` in the schema's own file."""
    file = schema.file
    names, types = [], file.message_type
    for index in indexes:
        if not 0 <= index < len(types):
            raise IndexError(f"message index {indexes} is not in {file.name}")
        names.append(types[index].name)
        types = types[index].nested_type
    return ".".join(([file.package] if file.package else []) + names)


def first_message(schema: ProtoSchema) -> str:
    return message_name(schema, [0])


def message_names(schema: ProtoSchema) -> list[str]:
    """The full names of the schema's own file's top-level messages."""
    return [message_name(schema, [index]) for index in range(len(schema.file.message_type))]


# --- Spark types ------------------------------------------------------------------


def spark_schema(descriptor) -> T.StructType:
    return _struct(descriptor, ())


def _struct(descriptor, seen: tuple[str, ...]) -> T.StructType:
    if descriptor.full_name in seen:
        raise UnsupportedSchema(f"message {descriptor.full_name} contains itself; recursive "
                                  "messages have no Spark type")
    seen = seen + (descriptor.full_name,)
    return T.StructType([T.StructField(f.name, _field_type(f, seen), True) for f in descriptor.fields])


def _field_type(field, seen) -> T.DataType:
    if _is_map(field):
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return T.MapType(_single_type(key, seen), _single_type(value, seen), True)
    single = _single_type(field, seen)
    return T.ArrayType(single, True) if _repeated(field) else single


def _single_type(field, seen) -> T.DataType:
    if field.type != TYPE_MESSAGE:
        return SCALARS[field.type]
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return T.TimestampType()
    if name in WRAPPERS:
        return _single_type(field.message_type.fields_by_name["value"], seen)
    return _struct(field.message_type, seen)


def _repeated(field) -> bool:
    # `is_repeated` from protobuf 6; `label` (deprecated there) before
    repeated = getattr(field, "is_repeated", None)
    return repeated if repeated is not None else field.label == 3


def _is_map(field) -> bool:
    return (field.type == TYPE_MESSAGE and _repeated(field)
            and field.message_type.GetOptions().map_entry)


# --- Python values Arrow takes ------------------------------------------------------


def converter(descriptor) -> Callable[[Any], dict]:
    fields = [(f.name, _field_converter(f)) for f in descriptor.fields]
    presence = {f.name for f in descriptor.fields if f.type == TYPE_MESSAGE and not _repeated(f)}

    def convert(message) -> dict:
        return {name: (None if name in presence and not message.HasField(name)
                       else convert_field(getattr(message, name)))
                for name, convert_field in fields}

    return convert


def _field_converter(field) -> Callable[[Any], Any]:
    if _is_map(field):
        value = _single_converter(field.message_type.fields_by_name["value"])
        return lambda entries: {k: value(v) for k, v in entries.items()}
    single = _single_converter(field)
    if _repeated(field):
        return lambda items: [single(i) for i in items]
    return single


def _single_converter(field) -> Callable[[Any], Any]:
    if field.type == TYPE_ENUM:
        values = field.enum_type.values_by_number
        return lambda number: values[number].name if number in values else str(number)
    if field.type in (4, 6):  # uint64, fixed64: DECIMAL(20, 0)
        from decimal import Decimal

        return Decimal
    if field.type != TYPE_MESSAGE:
        return lambda value: value
    name = field.message_type.full_name
    if name == TIMESTAMP:
        from datetime import timezone

        return lambda ts: ts.ToDatetime(tzinfo=timezone.utc)
    if name in WRAPPERS:
        return lambda wrapper: wrapper.value
    return converter(field.message_type)


# --- reading records ------------------------------------------------------------------


class Reader:
    """Reads framed records (or plain ones, `framed=False`) with the reader message.

    `writers` maps schema id -> ProtoSchema, or None for an id the registry
    does not have."""

    def __init__(self, reader: ProtoSchema, message: str, writers: dict, framed: bool = True):
        from google.protobuf import message_factory

        descriptor = pool_of(reader).FindMessageTypeByName(message)
        self.message, self.descriptor = message, descriptor
        self.cls = message_factory.GetMessageClass(descriptor)
        self.convert = converter(descriptor)
        self.writers, self.framed = writers, framed

    def read(self, value: bytes | None) -> tuple[dict | None, str | None]:
        if value is None:
            return None, NULL_VALUE
        if not self.framed:
            return self._parse(value, "the schema_file's message")
        schema_id = wire.frame_id(value, payload_at_least=1)
        if schema_id is None:
            return None, NOT_FRAMED
        writer = self.writers.get(schema_id)
        if writer is None:
            return None, unknown_schema(schema_id)
        try:
            indexes, start = wire.read_indexes(value)
            name = message_name(writer, indexes)
        except (ValueError, IndexError) as error:
            return None, f"does not decode with schema id {schema_id}: {error}"
        if name != self.message:
            return None, (f"schema id {schema_id} names message {name}, not the reader's "
                          f"{self.message}")
        return self._parse(value[start:], f"schema id {schema_id}")

    def _parse(self, payload: bytes, which: str):
        from google.protobuf.message import DecodeError

        try:
            return self.convert(self.cls.FromString(payload)), None
        except (DecodeError, ValueError, RuntimeError, OverflowError) as error:
            field = wrong_field(self.descriptor, payload)  # only for a failed record: read again
            return None, (f"{field} (with {which})" if field else
                          f"does not decode with {which}: {type(error).__name__}: {error}"[:300])


# --- naming the field of a record that failed -------------------------------------------

_LENGTH_DELIMITED = 2
_TEXT = 9  # FieldDescriptor.TYPE_STRING


def wrong_field(descriptor, payload: bytes, path: tuple[str, ...] = ()) -> str | None:
    """The first field of `payload` whose value its type cannot hold, as a reason naming the
    field path, the value as written and the type expected; None if no one field is wrong."""
    try:
        fields = list(_wire_fields(payload))
    except (IndexError, ValueError):
        return None
    by_number = {f.number: f for f in descriptor.fields}
    for number, wire_type, data in fields:
        field = by_number.get(number)
        if field is None or wire_type != _LENGTH_DELIMITED:
            continue
        name = ".".join(path + (field.name,))
        if field.type == _TEXT:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                return f"field {name}: value {data[:100]!r} is not a string (expected UTF-8 text)"
        elif field.type == TYPE_MESSAGE and not _is_map(field):
            inner = field.message_type
            if inner.full_name == TIMESTAMP:
                why = _timestamp_out_of_range(data)
                if why:
                    return f"field {name}: {why}"
            elif inner.full_name not in WRAPPERS:
                found = wrong_field(inner, data, path + (field.name,))
                if found:
                    return found
    return None


def _timestamp_out_of_range(data: bytes) -> str | None:
    from google.protobuf import timestamp_pb2

    stamp = timestamp_pb2.Timestamp.FromString(data)
    try:
        stamp.ToDatetime()
    except (ValueError, OverflowError):
        return (f"value {{seconds: {stamp.seconds}, nanos: {stamp.nanos}}} is not a TIMESTAMP "
                "(expected seconds within years 1-9999, nanos 0-999999999)")
    return None


def _wire_fields(data: bytes):
    """(field number, wire type, bytes of a length-delimited value) of each field."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            _, at = _varint(data, at)
            yield number, wire_type, b""
        elif wire_type == 1:
            at += 8
            yield number, wire_type, b""
        elif wire_type == 5:
            at += 4
            yield number, wire_type, b""
        elif wire_type == _LENGTH_DELIMITED:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated")
            yield number, wire_type, data[at:at + size]
            at += size
        else:
            raise ValueError(f"wire type {wire_type}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
