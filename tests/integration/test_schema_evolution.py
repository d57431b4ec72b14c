"""schema_evolution: a target that gains a column (Avro reader schema v2), and `fail`
stopping a JSON pipeline whose declared schema gained one, with nothing written."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.integration.conftest import Sender, registry_spec, run_once, table

V1 = {"type": "record", "name": "Click", "fields": [
    {"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "referrer", "type": ["null", "string"], "default": None}]}


def serialized(stand_in, topic, schema, record):
    from tests.integration.test_avro import serialized as avro_serialized

    return avro_serialized(stand_in, topic, schema, record)


def test_a_new_optional_field_adds_a_nullable_target_column(spark, kafka, topic, pipeline, registry):
    pipeline = replace(pipeline, source=replace(pipeline.source, format="avro", schema=None,
                                                registry=registry_spec(registry)))
    sender = Sender(kafka, topic)
    sender.send(serialized(registry, topic, V1, {"page": "/a", "ms": 1}), uid="c-1")
    sender.flush()
    run_once(spark, pipeline, timeout=600)
    assert "referrer" not in table(spark, pipeline.target.path).columns

    sender.send(serialized(registry, topic, V2, {"page": "/b", "ms": 2, "referrer": "/a"}), uid="c-2")
    sender.flush()
    run_once(spark, pipeline, timeout=600)  # the reader is v2 now: latest at start
    rows = {r._uid: r for r in table(spark, pipeline.target.path).collect()}
    assert (rows["c-1"].referrer, rows["c-2"].referrer) == (None, "/a")
    [field] = [f for f in table(spark, pipeline.target.path).schema.fields if f.name == "referrer"]
    assert field.nullable


def test_schema_evolution_fail_stops_naming_the_column_and_writes_nothing(
        spark, kafka, topic, pipeline):
    from delta.tables import DeltaTable

    sender = Sender(kafka, topic)
    sender.send({"order_id": "o1", "customer": "c1", "amount": 1.0}, uid="u-1")
    sender.flush()
    run_once(spark, pipeline, timeout=600)
    sender.send({"order_id": "o2", "customer": "c2", "amount": 2.0, "coupon": "X"}, uid="u-2")
    sender.send(b"{broken", uid="bad")  # a dead letter that must not be written either
    sender.flush()
    grown = replace(pipeline, schema_evolution="fail", source=replace(
        pipeline.source, schema=pipeline.source.schema + ", coupon STRING"))
    error = failure_of(spark, grown)
    assert "column coupon (string) is new" in str(error) and "schema_evolution: fail" in str(error)
    assert [r._uid for r in table(spark, pipeline.target.path).collect()] == ["u-1"]
    assert not DeltaTable.isDeltaTable(spark, pipeline.dead_letter.path)


def test_widen_grows_int_and_decimal_columns_in_place_and_refuses_a_type_delta_cannot_widen_to(
        spark, kafka, topic, pipeline):
    from delta.tables import DeltaTable

    sender = Sender(kafka, topic)
    narrow = replace(pipeline, schema_evolution="widen", source=replace(
        pipeline.source, schema="order_id STRING NOT NULL, qty INT, price DECIMAL(10,2)"))
    sender.send({"order_id": "o1", "qty": 1, "price": "1.25"}, uid="u-1")
    sender.flush()
    run_once(spark, narrow, timeout=600)
    path = pipeline.target.path
    assert DeltaTable.forPath(spark, path).detail().first().properties["delta.enableTypeWidening"] == "true"

    sender.send({"order_id": "o2", "qty": 3_000_000_000, "price": "12345678901.125"}, uid="u-2")
    sender.flush()
    wide = replace(narrow, source=replace(
        narrow.source, schema="order_id STRING NOT NULL, qty BIGINT, price DECIMAL(14,3)"))
    run_once(spark, wide, timeout=600)
    types = {f.name: f.dataType.simpleString() for f in table(spark, path).schema.fields}
    assert (types["qty"], types["price"]) == ("bigint", "decimal(14,3)")
    rows = {r._uid: (r.qty, str(r.price)) for r in table(spark, path).collect()}
    assert rows == {"u-1": (1, "1.250"), "u-2": (3_000_000_000, "12345678901.125")}

    sender.send({"order_id": "o3", "qty": "many", "price": "1"}, uid="u-3")
    sender.flush()
    texts = replace(wide, source=replace(wide.source, schema="order_id STRING NOT NULL, qty STRING, "
                                                            "price DECIMAL(14,3)"))
    error = failure_of(spark, texts)
    assert "column qty is bigint in the target and string in the batch (a type Delta's MERGE does not " \
           "widen to" in str(error)
    assert sorted(r._uid for r in table(spark, path).collect()) == ["u-1", "u-2"]


def failure_of(spark, pipeline) -> Exception:
    """The error a run of `pipeline` fails its first batch with (the query must fail)."""
    from pyspark.errors import StreamingQueryException

    from ingest.stream.query import start_query

    query, processor = start_query(spark, pipeline, once=True)
    try:
        with pytest.raises(StreamingQueryException):
            query.awaitTermination(600)
    finally:
        query.stop()
    return processor.failure[2]
