"""`ingest produce --format avro`: lines encoded with the schema, plain or through
confluent-kafka's AvroSerializer and a registry; a line that does not fit is a bad line."""

from __future__ import annotations

import io
import json
import struct

from fastavro import parse_schema, schemaless_reader

from ingest.kafka.encoders import avro_encoder
from ingest.kafka.produce import BadLine, Line, Options, parse_line
from tests.schema_registry_stand_in import StandInRegistry

SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"}]}


def schema_file(tmp_path):
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(SCHEMA))
    return path


def test_plain_avro_lines_and_a_line_that_does_not_fit(tmp_path):
    options = Options("orders", encode=avro_encoder(schema_file(tmp_path), "orders", None))
    good = parse_line(1, b'{"order_id": "o1", "amount": 2.5}', options)
    assert isinstance(good, Line)
    assert schemaless_reader(io.BytesIO(good.value), parse_schema(SCHEMA)) == {"order_id": "o1", "amount": 2.5}
    bad = parse_line(2, b'{"order_id": "o2"}', options)
    assert isinstance(bad, BadLine) and bad.reason.startswith("does not fit the schema")


def test_with_a_registry_the_value_is_framed_and_the_schema_registered(tmp_path):
    registry = StandInRegistry("svc", "pw").start()
    try:
        url = registry.url.replace("http://", "http://svc:pw@")
        options = Options("orders", encode=avro_encoder(schema_file(tmp_path), "orders", url))
        line = parse_line(1, b'{"order_id": "o1", "amount": 2.5}', options)
        assert line.value[0] == 0 and struct.unpack(">I", line.value[1:5])[0] == 1
        assert registry.subjects == {"orders-value": [1]}
    finally:
        registry.stop()
