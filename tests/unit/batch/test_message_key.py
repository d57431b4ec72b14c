"""A table's key columns from the schema in Debezium's JSON message keys (`message_key`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import types as T

from ingest.batch.message_columns import NoRowSchema, TopicSchemas, row_columns
from ingest.batch.message_key import KeyChangeRefused, NoKey, key_names, table_key, topic_key

KEYS = Path(__file__).parents[2] / "data" / "debezium" / "keys.txt"


def documented_keys() -> dict[str, bytes]:
    """Each `## <name>: ...` listing of tests/data/debezium/keys.txt: the key's bytes."""
    text = KEYS.read_text()
    assert text.startswith("# source: github.com/debezium/")
    return {block.split(":", 1)[0]: block.split("\n", 1)[1].encode() for block in text.split("\n## ")[1:]}


def schema_text(key: bytes) -> str | None:
    """What the batch's aggregation reads of a key: the text of its `schema.fields` (Spark's
    get_json_object), None for a key without one."""
    try:
        fields = (json.loads(key).get("schema") or {}).get("fields")
    except (ValueError, AttributeError):
        return None
    return None if fields is None else json.dumps(fields, separators=(",", ":"))


def key_schema(*names: str) -> str:
    return json.dumps([{"type": "int32", "optional": False, "field": name} for name in names])


ROW = T.StructType([T.StructField(n, T.IntegerType()) for n in ("id", "order_id", "line", "qty")])


@pytest.mark.parametrize("name", ["sqlserver customers", "mysql tutorial create", "mysql tutorial delete"])
def test_the_documented_keys_name_their_primary_key(name):
    assert key_names(schema_text(documented_keys()[name])) == ("id",)


@pytest.mark.parametrize("key", [b'{"id":1}', b"1001", b'{"schema":{"type":"int32","optional":false},"payload":7}',
                                 b"not json", None])
def test_a_key_without_a_struct_schema_names_no_field(key):
    """schemas.enable=false, a string key, a key that is one value, a null key (a keyless table)."""
    assert key_names(schema_text(key) if key is not None else None) == ()


def test_the_key_comes_from_the_message_keys_schema_in_its_order():
    assert table_key({"shop.dbo.lines": [key_schema("order_id", "line")]}, (), (), ROW) == ("order_id", "line")


def test_a_batch_without_a_key_schema_keeps_the_tables_key():
    assert table_key({"t": []}, (), ("id",), ROW) == ("id",)


def test_the_tables_key_keeps_its_order_when_the_message_lists_the_same_fields_otherwise():
    assert table_key({"t": [key_schema("line", "order_id")]}, (), ("order_id", "line"), ROW) == ("order_id", "line")


def test_a_changed_key_is_refused_naming_the_topic_and_both_lists():
    with pytest.raises(KeyChangeRefused, match=r"topic t: the message key's schema names \[order_id, line\], "
                                               r"the table's key is \[id\]; a table's key may not change"):
        table_key({"t": [key_schema("order_id", "line")]}, (), ("id",), ROW)


def test_two_keys_in_one_batch_are_refused_naming_both():
    with pytest.raises(KeyChangeRefused, match=r"topic t: the message key's schema names \[id\] in one record "
                                               r"of the batch and \[order_id\] in another"):
        topic_key("t", [key_schema("id"), key_schema("order_id"), key_schema("id")])


def test_two_topics_of_one_table_with_other_keys_are_refused_naming_both():
    with pytest.raises(KeyChangeRefused, match=r"topic b: the message key's schema names \[order_id\], the "
                                               r"message key's schema of topic a is \[id\]"):
        table_key({"a": [key_schema("id")], "b": [key_schema("order_id")]}, (), (), ROW)


def test_cdc_key_wins_and_is_checked_against_the_key_schema():
    assert table_key({"t": [key_schema("id")]}, ("ID",), (), ROW) == ("ID",)
    assert table_key({"t": []}, ("qty",), (), ROW) == ("qty",)  # no key schema: nothing to check
    with pytest.raises(KeyChangeRefused, match=r"topic t: the message key's schema names \[id\], cdc.key is "
                                               r"\[qty\]"):
        table_key({"t": [key_schema("id")]}, ("qty",), ("qty",), ROW)


def test_no_key_anywhere_stops_naming_the_topic():
    with pytest.raises(NoKey, match=r"topic shop.dbo.notes: its key columns come from the message key's schema "
                                    r".* no record of the batch has a key with a schema"):
        table_key({"shop.dbo.notes": []}, (), (), ROW)


def test_a_key_field_the_row_lacks_is_refused():
    with pytest.raises(KeyChangeRefused, match=r"topic t: the key \[sku\] .* names \[sku\], which the row does "
                                               r"not have"):
        table_key({"t": [key_schema("sku")]}, (), (), ROW)


def test_a_new_tables_first_batch_of_tombstones_takes_the_keys_columns():
    """A tombstone's key is its only information: the table is made with the key's columns."""
    key = schema_text(documented_keys()["mysql tutorial delete"])
    found = row_columns("t", TopicSchemas([], [key], tombstones_only=True), None, "add_columns")
    assert [(f.name, f.dataType.simpleString()) for f in found.fields] == [("id", "int")]
    with pytest.raises(NoRowSchema):  # a value without a schema says nothing of the columns
        row_columns("t", TopicSchemas([], [key], tombstones_only=False), None, "add_columns")
