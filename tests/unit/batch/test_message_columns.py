"""The row's columns from the Connect schema in Debezium's JSON messages (`message_columns`)."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import types as T

from ingest.batch.message_columns import NoRowSchema, row_columns, spark_type
from ingest.batch.schema_evolution import SchemaChangeRefused


def envelope(*fields: dict) -> str:
    """`schema.fields` of an envelope whose row has `fields`, as the converter writes it."""
    row = {"type": "struct", "optional": True, "name": "db.dbo.t.Value", "fields": list(fields)}
    return json.dumps([{**row, "field": "before"}, {**row, "field": "after"},
                       {"type": "string", "optional": False, "field": "op"}])


ID = {"type": "int32", "optional": False, "field": "id"}
NAME = {"type": "string", "optional": True, "field": "name"}


def ddl(columns: T.StructType) -> str:
    return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in columns.fields)


@pytest.mark.parametrize("field,expected", [
    ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
      "parameters": {"scale": "2", "connect.decimal.precision": "19"}}, "decimal(19,2)"),
    ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "4"}},
     "decimal(38,4)"),
    ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "timestamp"),
    ({"type": "int64", "name": "io.debezium.time.Timestamp"}, "timestamp"),
    ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "string"),
    ({"type": "int32", "name": "io.debezium.time.Date"}, "date"),
    ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "string"),
    ({"type": "string", "name": "io.debezium.data.Uuid"}, "string"),
    ({"type": "int32", "name": "io.debezium.time.Year"}, "int"),
    ({"type": "bytes", "name": "io.debezium.data.Bits"}, "binary"),
    ({"type": "int16"}, "smallint"), ({"type": "int64"}, "bigint"), ({"type": "float64"}, "double"),
    ({"type": "boolean"}, "boolean"), ({"type": "bytes"}, "binary"),
    ({"type": "array", "items": {"type": "string"}}, "array<string>"),
    ({"type": "struct", "fields": [{"type": "double", "field": "x"}, {"type": "float64", "field": "y"}]},
     None),
])
def test_connect_types_map_as_docs_cdc_md_says(field, expected):
    if expected is None:  # a struct of unknown type: refused, named
        with pytest.raises(SchemaChangeRefused, match=r"t: field p.x: Connect type 'double'"):
            spark_type(field, "t: field p")
        return
    assert spark_type(field, "t: field p").simpleString() == expected


def test_a_new_field_is_a_new_column_after_the_tables_and_a_vanished_one_stays():
    table = T.StructType([T.StructField("_uid", T.StringType()), T.StructField("id", T.IntegerType()),
                          T.StructField("gone", T.StringType()), T.StructField("_sequence", T.LongType())])
    found = row_columns("db.t", [envelope(ID, NAME)], table, "add_columns")
    assert ddl(found) == "id int, gone string, name string"
    assert ddl(row_columns("db.t", [envelope(ID), envelope(ID, NAME)], None, "fail")) == "id int, name string"


def test_a_changed_type_is_refused_naming_topic_field_and_both_types():
    table = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("name", T.StringType())])
    retyped = {**NAME, "type": "int64"}
    with pytest.raises(SchemaChangeRefused, match="topic db.t: field name is bigint in a message's schema "
                                                  "and string in the table"):
        row_columns("db.t", [envelope(ID, retyped)], table, "widen")
    with pytest.raises(SchemaChangeRefused, match="field name is bigint in a message's schema and string "
                                                  "in a message of this batch"):
        row_columns("db.t", [envelope(ID, NAME), envelope(ID, retyped)], None, "add_columns")


def test_a_wider_type_takes_widen_and_a_narrower_one_reads_into_the_table():
    table = T.StructType([T.StructField("id", T.IntegerType())])
    wider = {**ID, "type": "int64"}
    with pytest.raises(SchemaChangeRefused, match="schema_evolution: widen takes a wider type"):
        row_columns("db.t", [envelope(wider)], table, "add_columns")
    assert ddl(row_columns("db.t", [envelope(wider)], table, "widen")) == "id bigint"
    long_table = T.StructType([T.StructField("id", T.LongType())])
    assert ddl(row_columns("db.t", [envelope(ID)], long_table, "fail")) == "id bigint"


def test_no_schema_and_no_table_is_an_error_naming_the_topic():
    with pytest.raises(NoRowSchema, match="topic db.t: its columns come from its messages"):
        row_columns("db.t", [], None, "add_columns")
