"""`ingest produce --format protobuf`: JSON lines (protobuf's JSON mapping) as messages of
a compiled .proto, plain or through confluent-kafka's ProtobufSerializer and a registry."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pool, message_factory

from ingest.kafka.encoders import protobuf_encoder
from ingest.kafka.produce import BadLine, Line, Options, ProduceError, parse_line
from ingest.spec.proto_file import compile_proto
from tests.schema_registry_stand_in import StandInRegistry

PROTO = """\
syntax = "proto3";
package shop;
message Order {
  message Customer { string id = 1; }
  string order_id = 1;
  double amount = 2;
  Customer customer = 3;
}
"""


def proto_file(tmp_path):
    path = tmp_path / "order.proto"
    path.write_text(PROTO)
    return path


def order_class(path):
    pool = descriptor_pool.DescriptorPool()
    for file in compile_proto(path):
        pool.AddSerializedFile(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_plain_messages_and_a_line_that_does_not_fit(tmp_path):
    path = proto_file(tmp_path)
    options = Options("orders", encode=protobuf_encoder(path, "shop.Order", "orders", None))
    good = parse_line(1, b'{"order_id": "o1", "amount": 2.5, "customer": {"id": "c1"}}', options)
    assert isinstance(good, Line)
    message = order_class(path).FromString(good.value)
    assert (message.order_id, message.amount, message.customer.id) == ("o1", 2.5, "c1")
    bad = parse_line(2, b'{"order_id": "o2", "colour": "red"}', options)
    assert isinstance(bad, BadLine) and bad.reason.startswith("does not fit the schema")
    assert "colour" in bad.reason


def test_with_a_registry_the_value_is_framed_with_message_indexes(tmp_path):
    registry = StandInRegistry("svc", "pw").start()
    try:
        url = registry.url.replace("http://", "http://svc:pw@")
        encode = protobuf_encoder(proto_file(tmp_path), "shop.Order", "orders", url)
        value = encode({"order_id": "o1", "amount": 1.0})
        assert value[:6] == b"\x00\x00\x00\x00\x01\x00"  # magic, schema id 1, indexes [0]
        assert order_class(tmp_path / "order.proto").FromString(value[6:]).order_id == "o1"
        assert registry.subjects == {"orders-value": [1]}
        assert registry.schemas[0]["schemaType"] == "PROTOBUF"
    finally:
        registry.stop()


def test_a_message_the_file_does_not_have(tmp_path):
    with pytest.raises(ProduceError, match="has no message shop.Ordr"):
        protobuf_encoder(proto_file(tmp_path), "shop.Ordr", "orders", None)
