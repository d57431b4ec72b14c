"""Protobuf in the Confluent wire format (confluent-kafka's ProtobufSerializer against the
stand-in registry), and plain records with a local .proto compiled at start, each one
message type with a nested message, read by a real run into Delta."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from datetime import datetime, timezone

from ingest.cli import main
from tests.integration.conftest import (
    REGISTRY_PASSWORD,
    REGISTRY_USER,
    Sender,
    registry_client,
    registry_spec,
    run_once,
    table,
)
from tests.protobuf_messages import message_classes

TS = datetime(2026, 11, 1, 10, 0, 0, 500000, tzinfo=timezone.utc)
ORDER_PROTO = """\
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  message Customer {
    string id = 1;
    bool vip = 2;
  }
  string order_id = 1;
  int64 amount = 2;
  google.protobuf.Timestamp ts = 3;
  Customer customer = 4;
  repeated string tags = 5;
}

message Refund { string order_id = 1; }
"""
LINES = [  # protobuf's JSON mapping: int64 as text or number, Timestamp as RFC 3339
    {"order_id": "o1", "amount": "10", "ts": "2026-11-01T10:00:00.500Z",
     "customer": {"id": "c1", "vip": True}, "tags": ["t1", "t2"]},
    {"order_id": "o2", "amount": 20, "customer": {"id": "c2"}},
]


def serialized(stand_in, topic: str, message) -> bytes:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = ProtobufSerializer(type(message), registry_client(stand_in),
                                    {"use.deprecated.format": False})
    return serializer(message, SerializationContext(topic, MessageField.VALUE))


def order(classes, i: int, **more):
    message = classes["Order"](order_id=f"o{i}", amount=10 * i, tags=[f"t{i}"], status=i % 2, **more)
    message.ts.FromDatetime(TS.replace(tzinfo=None))
    message.customer.id, message.customer.vip = f"c{i}", i % 2 == 1
    return message


def test_protobuf_with_a_nested_message_and_two_versions(spark, kafka, topic, pipeline, registry):
    v1, v2 = message_classes(1), message_classes(2)
    sender = Sender(kafka, topic)
    sender.send(serialized(registry, topic, order(v1, 1)), uid="p-1")
    sender.send(serialized(registry, topic, order(v2, 2, channel="app")), uid="p-2")
    refund = serialized(registry, topic, v2["Refund"](order_id="o2"))
    sender.send(refund, uid="refund")  # another message of the file: not the reader's
    sender.flush()
    pipeline = replace(pipeline, source=replace(pipeline.source, format="protobuf", schema=None,
                                                registry=registry_spec(registry)))
    run_once(spark, pipeline, timeout=600)

    target = table(spark, pipeline.target.path)
    assert dict(target.dtypes)["customer"] == "struct<id:string,vip:boolean>"
    rows = {r._uid: r for r in target.collect()}
    assert sorted(rows) == ["p-1", "p-2"]
    assert (rows["p-1"].customer.id, rows["p-1"].customer.vip, rows["p-1"].status) == ("c1", True, "PAID")
    assert (rows["p-1"].channel, rows["p-2"].channel) == ("", "app")  # proto3: absent is the default
    assert rows["p-2"].amount == 20 and rows["p-2"].tags == ["t2"]
    micros = target.where("_uid = 'p-2'").selectExpr("unix_micros(ts) AS m").first().m
    assert micros == int(TS.timestamp() * 1_000_000)
    [dead] = table(spark, pipeline.dead_letter.path).collect()
    schema_id = struct.unpack(">I", refund[1:5])[0]
    assert dead.stage == "decode" and f"schema id {schema_id} names message shop.Refund" in dead.reason


def produce_orders(kafka, topic, tmp_path, *more) -> None:
    """`ingest produce --format protobuf` of LINES with the .proto, the uid from order_id."""
    proto, lines = tmp_path / "order.proto", tmp_path / "orders.jsonl"
    proto.write_text(ORDER_PROTO)
    lines.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    assert main(["produce", str(lines), "--topic", topic, "--bootstrap", kafka.bootstrap,
                 "--format", "protobuf", "--schema", str(proto), "--message", "shop.Order",
                 "--uid-field", "order_id", *more]) == 0


def assert_orders_landed(spark, pipeline) -> None:
    target = table(spark, pipeline.target.path)
    assert dict(target.dtypes)["customer"] == "struct<id:string,vip:boolean>"
    rows = {r._uid: r for r in target.collect()}
    assert sorted(rows) == ["o1", "o2"]
    assert (rows["o1"].amount, rows["o1"].customer.id, rows["o1"].customer.vip) == (10, "c1", True)
    assert (rows["o1"].tags, rows["o2"].tags, rows["o2"].ts) == (["t1", "t2"], [], None)
    micros = target.where("_uid = 'o1'").selectExpr("unix_micros(ts) AS m").first().m
    assert micros == int(TS.timestamp() * 1_000_000)


def test_a_proto_schema_file_is_compiled_at_start_and_reads_plain_records(
        spark, kafka, topic, pipeline, tmp_path):
    produce_orders(kafka, topic, tmp_path)  # no --registry: plain message bytes
    sender = Sender(kafka, topic)
    sender.send(b"\x0a\xff\x01o", uid="broken")  # field 1 says 255 bytes follow; 1 does
    sender.flush()
    pipeline = replace(pipeline, source=replace(
        pipeline.source, format="protobuf", schema=None,
        schema_file=str(tmp_path / "order.proto"), message="shop.Order"))
    run_once(spark, pipeline, timeout=600)

    assert_orders_landed(spark, pipeline)
    [dead] = table(spark, pipeline.dead_letter.path).collect()
    assert dead.stage == "decode" and "does not decode with the schema_file's message" in dead.reason


def test_ingest_produce_protobuf_through_the_registry_runs_through_a_pipeline(
        spark, kafka, topic, pipeline, tmp_path, registry):
    url = registry.url.replace("http://", f"http://{REGISTRY_USER}:{REGISTRY_PASSWORD}@")
    produce_orders(kafka, topic, tmp_path, "--registry", url)
    [schema_id] = registry.subjects[f"{topic}-value"]
    assert registry.schemas[schema_id - 1]["schemaType"] == "PROTOBUF"
    pipeline = replace(pipeline, source=replace(pipeline.source, format="protobuf", schema=None,
                                                registry=registry_spec(registry)))
    run_once(spark, pipeline, timeout=600)  # the reader message: the subject's first, shop.Order

    assert_orders_landed(spark, pipeline)
