"""Protobuf records written by confluent-kafka's ProtobufSerializer (stand-in registry),
read back with the reader message: types, a nested message, versions, bad records."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from ingest.batch.formats.registry import RegistryClient
from ingest.batch.formats.schemas import SchemaDecoder, proto_schema
from ingest.spec.model import KafkaSource, Registry, Source
from tests.protobuf_messages import message_classes
from tests.schema_registry_stand_in import StandInRegistry

TOPIC = "orders"
TS = datetime(2026, 11, 1, 10, 0, 0, 250000, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def stand_in():
    registry = StandInRegistry().start()
    yield registry
    registry.stop()


def serialize(stand_in, message) -> bytes:
    client = SchemaRegistryClient({"url": stand_in.url})
    serializer = ProtobufSerializer(type(message), client, {"use.deprecated.format": False})
    return serializer(message, SerializationContext(TOPIC, MessageField.VALUE))


def order(classes, **more):
    message = classes["Order"](order_id="o1", amount=5, tags=["a", "b"], status=1, **more)
    message.ts.FromDatetime(TS.replace(tzinfo=None))
    message.customer.id, message.customer.vip = "c1", True
    return message


@pytest.fixture(scope="module")
def decoder(stand_in):
    v1, v2 = message_classes(1), message_classes(2)
    records = {"v1": serialize(stand_in, order(v1)), "v2": serialize(stand_in, order(v2, channel="app")),
               "refund": serialize(stand_in, v2["Refund"](order_id="o9"))}
    source = Source(kafka=KafkaSource("localhost:9092", (TOPIC,)), format="protobuf",
                    registry=Registry(url=stand_in.url))
    opened = SchemaDecoder.open(source)  # the reader: latest = v2 (the Refund was registered with v2's file)
    for value in records.values():
        schema_id = struct.unpack(">I", value[1:5])[0]
        opened.writers[schema_id] = opened.fetch_writer(schema_id)
    return opened, records


def test_reader_columns_include_the_nested_message_and_the_new_field(decoder):
    opened, _ = decoder
    assert opened.message == "shop.Order"
    assert opened.columns.simpleString() == (
        "struct<order_id:string,amount:bigint,ts:timestamp,customer:struct<id:string,vip:boolean>,"
        "tags:array<string>,status:string,channel:string>")


def test_old_and_new_writers_read_with_the_reader_message(decoder):
    opened, records = decoder
    reader = opened.reader_factory()()
    old, why = reader.read(records["v1"])
    assert why is None
    assert old == {"order_id": "o1", "amount": 5, "ts": TS, "customer": {"id": "c1", "vip": True},
                   "tags": ["a", "b"], "status": "PAID", "channel": ""}
    assert reader.read(records["v2"])[0]["channel"] == "app"


def test_another_message_type_of_the_same_file_is_a_dead_letter(decoder):
    opened, records = decoder
    schema_id = struct.unpack(">I", records["refund"][1:5])[0]
    record, why = opened.reader_factory()().read(records["refund"])
    assert record is None and why == (f"schema id {schema_id} names message shop.Refund, "
                                      "not the reader's shop.Order")


def test_truncated_and_unknown_id_records_name_the_schema_id(decoder):
    opened, records = decoder
    schema_id = struct.unpack(">I", records["v2"][1:5])[0]
    record, why = opened.reader_factory()().read(records["v2"][:-4])
    assert record is None and f"schema id {schema_id}" in why
    unknown = b"\x00" + struct.pack(">I", 777) + records["v2"][5:]
    assert opened.reader_factory()().read(unknown) == (
        None, "unknown schema id 777: the registry has no such schema")


def test_referenced_files_come_first(stand_in):
    client = RegistryClient(Registry(url=stand_in.url))
    latest = client.subject_version(f"{TOPIC}-value", "latest", serialized=True)
    files = proto_schema(client, latest).files
    assert len(files) == 1  # timestamp.proto is built in: not a reference


def _length_delimited(number: int, data: bytes) -> bytes:
    return bytes([number << 3 | 2, len(data)]) + data


def _varint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


@pytest.mark.parametrize("payload, why", [
    (_length_delimited(1, b"o1") + _length_delimited(4, _length_delimited(1, b"c\xff\xfe")),
     "field customer.id: value b'c\\xff\\xfe' is not a string (expected UTF-8 text) "
     "(with the schema_file's message)"),
    (_length_delimited(1, b"o1") + _length_delimited(3, bytes([1 << 3]) + _varint(10**12)),
     "field ts: value {seconds: 1000000000000, nanos: 0} is not a TIMESTAMP (expected seconds within "
     "years 1-9999, nanos 0-999999999) (with the schema_file's message)"),
])
def test_a_value_its_field_cannot_hold_names_field_value_and_type(payload, why):
    from google.protobuf import timestamp_pb2

    from ingest.batch.formats import protobuf
    from tests.protobuf_messages import order_file

    schema = protobuf.ProtoSchema((timestamp_pb2.DESCRIPTOR.serialized_pb,
                                   order_file(2, "shop/order.proto").SerializeToString()))
    reader = protobuf.Reader(schema, "shop.Order", {}, framed=False)
    assert reader.read(payload) == (None, why)
