"""Decoding with schemas (avro, protobuf): the run's reader schema, the writer
schemas by id, and the Arrow UDF that reads one batch.

The registry is asked only on the driver: the reader schema once when the run
starts, then, per batch, only the writer schema ids not seen before in the run.
The UDF gets the schemas it needs with it, so executors never reach the
registry. A registry that does not answer raises `RegistryUnavailable` here,
before anything of the batch is written; it never becomes dead letters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from ingest.batch.formats import avro, protobuf
from ingest.batch.formats.registry import RegistryClient, SchemaNotFound
from ingest.errors import IngestError, UnsupportedSchema
from ingest.spec.model import Source
from ingest.spec.proto_file import ProtoFileError, compile_proto

DECODED = "__decoded"


class SchemaUnavailable(IngestError):
    """The reader schema cannot be had (no such subject, version or file): exit 2."""


@dataclass
class SchemaDecoder:
    """What a run needs to decode avro or protobuf; built once per run on the driver."""

    format: str
    reader: object  # avro: the schema's JSON text; protobuf: a ProtoSchema
    columns: StructType  # the payload columns: the reader schema as Spark types
    client: RegistryClient | None = None  # None: a schema_file, records not framed
    message: str | None = None  # protobuf: the message type
    writers: dict[int, object] = field(default_factory=dict)  # id -> schema (None: unknown id)

    @classmethod
    def open(cls, source: Source) -> SchemaDecoder:
        if source.format == "protobuf":
            return cls._open_protobuf(source)
        if source.registry is None:
            text = _read_file(source.schema_file)
            return cls("avro", text, avro.spark_schema(avro.parse(text)))
        client = RegistryClient(source.registry)
        reader = reader_schema(client, source)
        return cls("avro", reader.text, avro.spark_schema(avro.parse(reader.text)), client)

    @classmethod
    def _open_protobuf(cls, source: Source) -> SchemaDecoder:
        if source.registry is None:  # plain records, read with the compiled .proto's message
            try:
                schema = protobuf.ProtoSchema(compile_proto(source.schema_file))
            except ProtoFileError as error:
                raise SchemaUnavailable(f"source.schema_file: {error}") from None
            client, where = None, f"{source.schema_file}"
        else:
            client = RegistryClient(source.registry)
            schema = proto_schema(client, reader_schema(client, source, serialized=True))
            where = f"subject {source.subject}"
        message = source.message or protobuf.first_message(schema)
        try:
            descriptor = protobuf.pool_of(schema).FindMessageTypeByName(message)
        except KeyError:
            raise SchemaUnavailable(f"source.message: {message} is not a message of {where}; expected "
                                    f"one of {', '.join(protobuf.message_names(schema))}") from None
        return cls("protobuf", schema, protobuf.spark_schema(descriptor), client, message)

    @property
    def framed(self) -> bool:
        return self.client is not None

    def decode(self, with_raw: DataFrame, raw: str, stage: str, reason: str) -> DataFrame:
        """`with_raw` (one struct column `raw`) -> raw, stage, reason, the payload columns."""
        self.fetch_writers(with_raw, raw)
        decoded = with_raw.select(raw, self.udf()(F.col(f"{raw}.value")).alias(DECODED))
        return decoded.select(raw, F.col(f"{DECODED}.stage").alias(stage),
                              F.col(f"{DECODED}.reason").alias(reason),
                              *[F.col(f"{DECODED}.payload.`{f.name}`").alias(f.name)
                                for f in self.columns.fields])

    def fetch_writers(self, with_raw: DataFrame, raw: str) -> None:
        """The writer schemas of every id in the batch not seen before in this run."""
        if not self.framed:
            return
        ids = [row[0] for row in with_raw.select(_schema_id(F.col(f"{raw}.value")).alias("id"))
               .where("id IS NOT NULL").distinct().collect()]
        for schema_id in sorted(set(ids) - set(self.writers)):
            self.writers[schema_id] = self.fetch_writer(schema_id)

    def fetch_writer(self, schema_id: int):
        try:
            if self.format == "protobuf":
                return proto_schema(self.client, self.client.schema_by_id(schema_id, serialized=True))
            return self.client.schema_by_id(schema_id).text
        except (SchemaNotFound, UnsupportedSchema):
            return None  # its records become dead letters naming the id

    def udf(self):
        from pyspark.sql.functions import arrow_udf

        output = StructType([StructField("stage", StringType()), StructField("reason", StringType()),
                             StructField("payload", self.columns)])
        return arrow_udf(_batch_reader(self.reader_factory(), output), output)

    def reader_factory(self):
        """A picklable callable that makes the record reader on the executor."""
        if self.format == "protobuf":
            return _ProtobufReaderFactory(self.reader, self.message, dict(self.writers), self.framed)
        return _AvroReaderFactory(self.reader, dict(self.writers), self.framed)


@dataclass(frozen=True)
class _AvroReaderFactory:
    reader_text: str
    writers: dict
    framed: bool

    def __call__(self):
        return avro.Reader(self.reader_text, self.writers, self.framed)


@dataclass(frozen=True)
class _ProtobufReaderFactory:
    reader: protobuf.ProtoSchema
    message: str
    writers: dict
    framed: bool

    def __call__(self):
        return protobuf.Reader(self.reader, self.message, self.writers, self.framed)


def proto_schema(client: RegistryClient, registered) -> protobuf.ProtoSchema:
    """A registered Protobuf schema with the files it references, dependencies first."""
    files: list[bytes] = []
    for reference in registered.references:
        dependency = client.subject_version(reference["subject"], reference["version"], serialized=True)
        files += [f for f in proto_schema(client, dependency).files if f not in files]
    return protobuf.ProtoSchema(tuple(files) + (protobuf.from_registry_text(registered.text),))


def reader_columns(source: Source) -> StructType:
    """The payload columns of an avro/protobuf source (asks the registry)."""
    return SchemaDecoder.open(source).columns


def ddl(columns: StructType) -> str:
    """Columns as Spark DDL, e.g. for `ingest plan`."""
    return ", ".join(f"`{f.name}` {_type_ddl(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                     for f in columns.fields)


def _type_ddl(data_type) -> str:
    """Type words upper case, nested field names as they are (`simpleString().upper()` would
    rename a struct's fields)."""
    from pyspark.sql.types import ArrayType, MapType

    if isinstance(data_type, StructType):
        return f"STRUCT<{', '.join(f'`{f.name}`: {_type_ddl(f.dataType)}' for f in data_type.fields)}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{_type_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{_type_ddl(data_type.keyType)}, {_type_ddl(data_type.valueType)}>"
    return data_type.simpleString().upper()


def reader_schema(client: RegistryClient, source: Source, serialized: bool = False):
    try:
        return client.subject_version(source.subject, source.registry.version, serialized)
    except SchemaNotFound as error:
        raise SchemaUnavailable(f"source.registry: {error}; expected the subject "
                                f"{source.subject!r} to have a version {source.registry.version}"
                                ) from None


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SchemaUnavailable(f"source.schema_file: cannot read {path} "
                                f"({getattr(error, 'strerror', None) or error})") from None


def _schema_id(value: Column) -> Column:
    """The 4-byte id after the magic byte 0, or null when the record is not framed."""
    framed = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.unhex(F.lit("00")))
    return F.when(framed, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))


def _batch_reader(make_reader, output: StructType):
    """The Arrow UDF body: one pass over a batch of values, one reader per batch."""

    def read(values):
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_type

        reader = make_reader()
        arrow_type = to_arrow_type(output, timezone="UTC")
        rows = []
        for value in values.to_pylist():
            record, why = reader.read(value)
            rows.append({"stage": "decode" if why else None, "reason": why, "payload": record})
        try:
            return pa.array(rows, type=arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return pa.array([_arrow_row(row, arrow_type) for row in rows], type=arrow_type)

    return read


def _arrow_row(row: dict, arrow_type) -> dict:
    """One row that Arrow can take: a value it cannot (out of range) marks the record."""
    import pyarrow as pa

    try:
        pa.array([row], type=arrow_type)
        return row
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        return {"stage": "decode", "reason": f"a value does not fit its column: {error}"[:300],
                "payload": None}
