"""Avro schemas as Spark types, and records read with their writer schema (fastavro)."""

from __future__ import annotations

import io
import json
import struct

import pytest
from fastavro import parse_schema, schemaless_writer

from ingest.batch.formats import avro
from ingest.errors import UnsupportedSchema

V1 = {"type": "record", "name": "R", "fields": [
    {"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}
V2 = {"type": "record", "name": "R", "fields": [
    {"name": "id", "type": "string"}, {"name": "n", "type": "long"},
    {"name": "tag", "type": ["null", "string"], "default": None}]}


def framed(schema_id: int, schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def reader(writers=None):
    return avro.Reader(json.dumps(V2), writers or {1: json.dumps(V1), 2: json.dumps(V2)})


def test_spark_types_of_logical_types_unions_and_nesting():
    schema = avro.spark_schema(avro.parse(json.dumps({"type": "record", "name": "T", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "maybe", "type": ["null", "double"]},
        {"name": "tags", "type": {"type": "map", "values": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "I",
                                                              "fields": [{"name": "x", "type": "int"}]}}},
    ]})))
    assert schema.simpleString() == ("struct<ts:timestamp,local:timestamp_ntz,d:decimal(12,3),"
                                     "maybe:double,tags:map<string,bigint>,kind:string,"
                                     "items:array<struct<x:int>>>")
    assert [f.nullable for f in schema.fields] == [False, False, False, True, False, False, False]


def test_a_union_of_two_types_is_refused_with_the_reason():
    with pytest.raises(UnsupportedSchema, match="union of 2 non-null types"):
        avro.spark_schema({"type": "record", "name": "U",
                           "fields": [{"name": "x", "type": ["null", "int", "string"]}]})


def test_each_record_is_read_with_its_own_writer_schema():
    old = reader().read(framed(1, V1, {"id": "a", "n": 7}))
    new = reader().read(framed(2, V2, {"id": "b", "n": 8, "tag": "t"}))
    assert old == ({"id": "a", "n": 7, "tag": None}, None)
    assert new == ({"id": "b", "n": 8, "tag": "t"}, None)


@pytest.mark.parametrize("value, reason", [
    (b"\x00\x00\x00\x00\x07abc", "unknown schema id 7"),
    (b"{\"id\": 1}", "not in the Confluent wire format"),
    (None, "null value (tombstone)"),
])
def test_records_that_cannot_be_read_say_why(value, reason):
    record, why = reader({1: json.dumps(V1), 7: None}).read(value)
    assert record is None and reason in why


def test_a_truncated_record_names_its_schema_id():
    whole = framed(2, V2, {"id": "bbbbbbbb", "n": 8, "tag": "tttt"})
    record, why = reader().read(whole[:-3])
    assert record is None and "schema id 2" in why and "truncated" in why


def test_trailing_bytes_are_not_silently_ignored():
    record, why = reader().read(framed(1, V1, {"id": "a", "n": 7}) + b"\x01\x02")
    assert record is None and "left over" in why


def test_a_writer_that_cannot_resolve_to_the_reader_is_a_reason_with_the_id():
    string_n = {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "string"}, {"name": "n", "type": "string"}]}
    record, why = reader({3: json.dumps(string_n)}).read(framed(3, string_n, {"id": "a", "n": "x"}))
    assert record is None and "schema id 3" in why


def test_uuids_become_text():
    schema = {"type": "record", "name": "U", "fields": [
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]}
    value = "0b6a4c9e-8d6f-4b53-9d0a-5f1e2c3d4e5f"
    assert avro.Reader(json.dumps(schema), {1: json.dumps(schema)}).read(
        framed(1, schema, {"u": value})) == ({"u": value}, None)


# Debezium's AvroConverter: Connect's logical types as `connect.name` on plain longs, ints and
# records (issue 28), a Decimal's precision 64 where the column declares none
DEBEZIUM_ROW = {"type": "record", "name": "Value", "namespace": "dbserver1.inventory.purchaseorder",
                "fields": [
    {"name": "id", "type": "int"},
    {"name": "orderdate", "type": ["null", {"type": "long", "connect.version": 1,
                                            "connect.name": "io.debezium.time.MicroTimestamp"}]},
    {"name": "shipdate", "type": ["null", {"type": "int", "connect.version": 1,
                                           "connect.name": "io.debezium.time.Date"}]},
    {"name": "shiptime", "type": ["null", {"type": "long", "connect.version": 1,
                                           "connect.name": "io.debezium.time.MicroTime"}]},
    {"name": "total", "type": ["null", {"type": "bytes", "scale": 2, "precision": 64,
                                        "connect.version": 1, "connect.parameters": {"scale": "2"},
                                        "connect.name": "org.apache.kafka.connect.data.Decimal",
                                        "logicalType": "decimal"}]},
    {"name": "ratio", "type": ["null", {"type": "record", "name": "VariableScaleDecimal",
                                        "namespace": "io.debezium.data", "connect.version": 1,
                                        "connect.name": "io.debezium.data.VariableScaleDecimal",
                                        "fields": [{"name": "scale", "type": "int"},
                                                   {"name": "value", "type": "bytes"}]}]}]}


def test_debezium_connect_names_become_spark_types_and_values():
    from datetime import date, datetime, timezone
    from decimal import Decimal

    from pyspark.sql.types import DateType, DecimalType, StringType, TimestampType

    types = {f.name: f.dataType for f in avro.spark_schema(avro.parse(json.dumps(DEBEZIUM_ROW))).fields}
    assert types["orderdate"] == TimestampType() and types["shipdate"] == DateType()
    assert types["shiptime"] == StringType() and types["ratio"] == StringType()
    assert types["total"] == DecimalType(38, 2)
    read = avro.Reader(json.dumps(DEBEZIUM_ROW), {7: json.dumps(DEBEZIUM_ROW)})
    record, why = read.read(framed(7, DEBEZIUM_ROW, {
        "id": 1, "orderdate": 1548936781000000, "shipdate": 17927, "shiptime": 45181000001,
        "total": Decimal("-39.98"), "ratio": {"scale": 3, "value": (-12345).to_bytes(2, "big", signed=True)}}))
    assert why is None
    assert record == {"id": 1, "orderdate": datetime(2019, 1, 31, 12, 13, 1, tzinfo=timezone.utc),
                      "shipdate": date(2019, 1, 31), "shiptime": "12:33:01.000001",
                      "total": Decimal("-39.98"), "ratio": "-12.345"}
    record, why = read.read(framed(7, DEBEZIUM_ROW, {
        "id": 2, "orderdate": 253402300800000000, "shipdate": None, "shiptime": None, "total": None,
        "ratio": None}))
    assert record is None
    assert why == ("does not decode with schema id 7: column orderdate: value 253402300800000000 is "
                   "outside years 1-9999 as io.debezium.time.MicroTimestamp")


SHIPMENT = {"type": "record", "name": "S", "fields": [
    {"name": "id", "type": "string"}, {"name": "weight_kg", "type": "double"},
    {"name": "dest", "type": {"type": "record", "name": "D", "fields": [{"name": "zip", "type": "int"}]}}]}


def shipment_writer(weight: str = "double", zip_type: str = "int", weight_name: str = "weight_kg") -> dict:
    return {"type": "record", "name": "S", "fields": [
        {"name": "id", "type": "string"}, {"name": weight_name, "type": weight},
        {"name": "dest", "type": {"type": "record", "name": "D", "fields": [{"name": "zip", "type": zip_type}]}}]}


@pytest.mark.parametrize("writer, record, why", [
    (shipment_writer(weight="string"), {"id": "s1", "weight_kg": "2,5 kg", "dest": {"zip": 5}},
     "field weight_kg: value '2,5 kg' (string in schema id 7) cannot be read as the reader schema's double"),
    (shipment_writer(zip_type="string"), {"id": "s1", "weight_kg": 2.5, "dest": {"zip": "69OO1"}},
     "field dest.zip: value '69OO1' (string in schema id 7) cannot be read as the reader schema's int"),
    (shipment_writer(weight_name="weight"), {"id": "s1", "weight": 2.5, "dest": {"zip": 5}},
     "field weight_kg: missing in schema id 7 (the writer's record has no such field) and the reader "
     "schema gives it no default"),
])
def test_a_value_the_reader_cannot_take_names_field_value_and_types(writer, record, why):
    shipments = avro.Reader(json.dumps(SHIPMENT), {7: json.dumps(writer)})
    assert shipments.read(framed(7, writer, record)) == (None, why)
