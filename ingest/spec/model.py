"""The pipeline contract (pipeline-spec.md) as typed, frozen values.

No I/O and no Spark here: `spec_loader` builds these from YAML, everything else
reads them. Defaults below are the contract's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

FORMATS = ("json", "avro", "protobuf", "string", "bytes")
REGISTRY_FORMATS = ("avro", "protobuf")  # decoded with a schema from a registry or a file
SCHEMA_EVOLUTIONS = ("add_columns", "fail", "widen")
MODES = ("insert_only", "upsert")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
UID_KINDS = ("header", "field", "fields", "coordinates", "key")
CDC_FORMATS = ("debezium",)
UNKNOWN_FIELDS = ("ignore", "warn", "dead_letter")
DELETES = ("soft", "hard")


def frozen_map(items: Mapping | None = None) -> Mapping:
    """A read-only mapping, so a spec value cannot be changed after loading."""
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class KafkaSource:
    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    # "earliest" | "latest" | {topic: {partition: offset}}; applies to a new checkpoint only
    starting_offsets: str | Mapping[str, Mapping[int, int]] = "earliest"
    # A first `earliest` run would otherwise read a whole topic as one batch; 100,000 keeps
    # most of the throughput of larger batches (docs/production.md's table) with half the memory
    max_offsets_per_trigger: int | None = 100_000
    isolation_level: str = "read_committed"
    allow_data_loss: bool = False
    # passed through to Spark as kafka.<key>; may hold secrets (masked on output)
    options: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class RegistryTls:
    ca: str | None = None  # a PEM file of the CAs to trust; default: the system's
    cert: str | None = None  # client certificate (PEM) for mutual TLS
    key: str | None = None


@dataclass(frozen=True)
class Registry:
    """A Confluent-compatible Schema Registry; the credentials are secrets."""

    url: str
    subject: str | None = None  # default: <topic>-value, per topic with a ${topic} target
    version: str | int = "latest"  # the reader schema: latest at start, or a version number
    basic: str | None = field(default=None, repr=False)  # "user:password"
    bearer: str | None = field(default=None, repr=False)
    tls: RegistryTls | None = None


@dataclass(frozen=True)
class Source:
    kafka: KafkaSource
    format: str = "json"
    schema: str | None = None  # Spark DDL, or "variant" (json); required for json
    # per-topic DDL with a pattern; a topic not named here uses `schema`
    schemas: Mapping[str, str] = field(default_factory=frozen_map)
    registry: Registry | None = None  # avro | protobuf: the writer schemas by id, the reader schema
    schema_file: str | None = None  # avro | protobuf without a registry: .avsc, or .proto + message
    message: str | None = None  # protobuf: the message type, e.g. shop.Order
    # json: a top-level field the schema does not name is ignored, counted in the batch line
    # (warn) or makes the record a dead letter
    unknown_fields: str = "warn"

    @property
    def variant(self) -> bool:
        """json records each decoded as one VARIANT column, `payload` (`schema: variant`)."""
        return self.format == "json" and (self.schema or "").strip().lower() == "variant"

    @property
    def subject(self) -> str | None:
        """The registry subject of the reader schema (TopicNameStrategy by default)."""
        if self.registry is None:
            return None
        if self.registry.subject:
            return self.registry.subject
        return f"{self.kafka.topics[0]}-value" if self.kafka.topics else None


@dataclass(frozen=True)
class Transform:
    select: tuple[str, ...] = ("*",)
    where: str | None = None


@dataclass(frozen=True)
class Uid:
    header: str | None = None
    field: str | None = None
    fields: tuple[str, ...] = ()
    coordinates: bool = False
    key: bool = False  # the Kafka key (UTF-8); in upsert, a tombstone deletes it

    @property
    def kind(self) -> str:
        if self.key:
            return "key"
        if self.header is not None:
            return "header"
        if self.field is not None:
            return "field"
        if self.fields:
            return "fields"
        return "coordinates"


@dataclass(frozen=True)
class DedupHorizon:
    column: str
    within: str  # as written, e.g. "1 hour"
    within_seconds: int


@dataclass(frozen=True)
class Target:
    path: str | None = None
    table: str | None = None  # catalog name, e.g. main.sales.orders
    mode: str = "insert_only"
    order_by: str | None = None  # upsert only
    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    dedup_horizon: DedupHorizon | None = None
    deletes: str = "soft"  # soft: the row stays with _deleted = true; hard: the row goes
    history: bool = False  # SCD type 2: every version, with _valid_from, _valid_to, _current
    properties: Mapping[str, str] = field(default_factory=frozen_map)  # Delta table properties

    @property
    def location(self) -> str:
        """Path or table name, for messages."""
        return self.path or self.table or ""


@dataclass(frozen=True)
class Cdc:
    """Change data capture: the envelope's format, the row key and the change order."""

    # () where the key comes from the message key's schema, per table (`batch/message_key.py`)
    key: tuple[str, ...]
    format: str = "debezium"
    # None: each connector's own position (batch/formats/cdc.py); a tuple: a composite order,
    # compared item by item
    sequence: str | tuple[str, ...] | None = None
    # column -> its Debezium encoding where the message does not say it (docs/cdc.md)
    encodings: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def sequence_items(self) -> tuple[str, ...]:
        """What `sequence` names, one item or several; () for the connector's own order."""
        return (self.sequence,) if isinstance(self.sequence, str) else self.sequence or ()


def cdc_uid(key: tuple[str, ...]) -> Uid:
    """With cdc the row key is the uid: one column as it is, several hashed as uid.fields are.
    No key yet (it comes from the message key's schema): no uid until a batch names it."""
    return Uid(field=key[0]) if len(key) == 1 else Uid(fields=key)


# what `cdc.encodings` accepts: Kafka Connect's and Debezium's logical type names, and the
# decimal modes `string` and `double` (batch/formats/connect_types.py converts each)
CDC_ENCODINGS = (
    "org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal", "string",
    "double", "org.apache.kafka.connect.data.Timestamp", "io.debezium.time.Timestamp",
    "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp",
    "org.apache.kafka.connect.data.Date", "io.debezium.time.Date",
    "org.apache.kafka.connect.data.Time", "io.debezium.time.Time", "io.debezium.time.MicroTime",
    "io.debezium.time.NanoTime", "io.debezium.time.ZonedTimestamp", "io.debezium.time.ZonedTime",
    "io.debezium.data.Json", "io.debezium.data.Uuid", "io.debezium.data.Enum",
    "io.debezium.data.EnumSet", "io.debezium.data.Xml", "io.debezium.time.Year",
    "io.debezium.data.Bits")


@dataclass(frozen=True)
class DeadLetter:
    path: str | None = None
    table: str | None = None
    properties: Mapping[str, str] = field(default_factory=frozen_map)  # Delta table properties
    # a batch with a larger share of dead letters fails the run (exit 1); None: never
    max_share: float | None = None

    @property
    def location(self) -> str:
        return self.path or self.table or ""


@dataclass(frozen=True)
class Trigger:
    available_now: bool = True
    processing_time: str | None = None


ON_DATA_LOSS = ("fail", "record")


@dataclass(frozen=True)
class Metrics:
    prometheus_port: int | None = None  # /metrics on the driver
    consumer_group: str | None = None  # committed offsets mirrored there after each Delta commit


@dataclass(frozen=True)
class Maintenance:
    optimize_every_batches: int | None = None
    optimize_every_seconds: int | None = None  # `optimize_every: "1 hour"`
    vacuum_retain: str = "168 hours"
    vacuum_retain_seconds: int = 168 * 3600
    # hard deletes: how long `ingest maintain` keeps a delete in the delete log (docs/cdc.md)
    delete_log_retain: str = "7 days"
    delete_log_retain_seconds: int = 7 * 24 * 3600


@dataclass(frozen=True)
class Operations:
    metrics: Metrics = Metrics()
    maintenance: Maintenance = Maintenance()
    on_data_loss: str = "fail"  # fail | record
    # per-topic pipelines: how many tables of one batch commit at once (1: one after another)
    table_threads: int = 8


@dataclass(frozen=True)
class Pipeline:
    name: str
    source: Source
    uid: Uid
    target: Target
    checkpoint: str
    dead_letter: DeadLetter
    transform: Transform | None = None
    trigger: Trigger = Trigger()
    spark_conf: Mapping[str, str] = field(default_factory=frozen_map)
    operations: Operations = Operations()
    cdc: Cdc | None = None
    # add_columns: a new payload column is added to the target; fail: any change stops the run;
    # widen: add_columns, and the type widenings Delta's MERGE applies (batch/schema_evolution.py)
    schema_evolution: str = "add_columns"
    # where it was declared, for messages
    source_file: str | None = None
    # resolved values that must never be printed (from secret variables or secret keys)
    secret_values: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @property
    def deletes_by_tombstone(self) -> bool:
        """An upsert keyed by the Kafka key: a tombstone (a null value) deletes its key."""
        return self.cdc is None and self.uid.key and self.target.mode == "upsert"

    @property
    def applies_deletes(self) -> bool:
        """cdc changes, or tombstones in an upsert by Kafka key: `target.deletes` applies."""
        return self.cdc is not None or self.deletes_by_tombstone

    @property
    def keeps_delete_log(self) -> bool:
        """Hard deletes keep the delete log beside the target (`<target>_deletes`)."""
        return self.applies_deletes and self.target.deletes == "hard"

    @property
    def columns_from_messages(self) -> bool:
        """cdc with format json and no schema for the topic: the row's columns come from the
        Connect schema in each message (`batch/formats/message_columns.py`)."""
        return self.cdc is not None and self.source.format == "json" and self.source.schema is None

    @property
    def key_from_messages(self) -> bool:
        """cdc without cdc.key: each table's key columns are the fields of its message key's
        schema, found at its first batch (`batch/message_key.py`); until then there is no uid."""
        return self.cdc is not None and not self.cdc.key

    def with_key(self, key: tuple[str, ...]) -> Pipeline:
        """This pipeline with `key` as its cdc.key, and so its uid."""
        assert self.cdc is not None
        return replace(self, cdc=replace(self.cdc, key=key), uid=cdc_uid(key))

    @property
    def records_data_loss(self) -> bool:
        """on_data_loss: record, or its older spelling source.kafka.allow_data_loss: true."""
        return self.operations.on_data_loss == "record" or self.source.kafka.allow_data_loss
