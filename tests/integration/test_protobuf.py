"""Protobuf in the Confluent wire format (confluent-kafka's ProtobufSerializer against the
stand-in registry), one message type with a nested message, read by a real run into Delta."""

from __future__ import annotations

import struct
from dataclasses import replace
from datetime import datetime, timezone

from tests.integration.conftest import Sender, registry_client, registry_spec, run_once, table
from tests.protobuf_messages import message_classes

TS = datetime(2026, 11, 1, 10, 0, 0, 500000, tzinfo=timezone.utc)


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
