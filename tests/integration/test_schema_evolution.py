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
    from pyspark.errors import StreamingQueryException

    from ingest.stream.query import start_query

    sender = Sender(kafka, topic)
    sender.send({"order_id": "o1", "customer": "c1", "amount": 1.0}, uid="u-1")
    sender.flush()
    run_once(spark, pipeline, timeout=600)
    sender.send({"order_id": "o2", "customer": "c2", "amount": 2.0, "coupon": "X"}, uid="u-2")
    sender.send(b"{broken", uid="bad")  # a dead letter that must not be written either
    sender.flush()
    grown = replace(pipeline, schema_evolution="fail", source=replace(
        pipeline.source, schema=pipeline.source.schema + ", coupon STRING"))
    query, processor = start_query(spark, grown, once=True)
    try:
        with pytest.raises(StreamingQueryException):
            query.awaitTermination(600)
    finally:
        query.stop()
    _, _, error = processor.failure
    assert "column coupon (string) is new" in str(error) and "schema_evolution: fail" in str(error)
    assert [r._uid for r in table(spark, pipeline.target.path).collect()] == ["u-1"]
    assert not DeltaTable.isDeltaTable(spark, pipeline.dead_letter.path)
