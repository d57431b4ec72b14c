"""Avro in the Confluent wire format, written by confluent-kafka's AvroSerializer
against the stand-in registry, read by a real run into Delta."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from tests.integration.conftest import registry_client, registry_spec, run_once, table

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "amount", "type": "int"},  # promoted to long by the v2 reader
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "customer", "type": {"type": "record", "name": "Customer",
                                      "fields": [{"name": "id", "type": "string"},
                                                 {"name": "vip", "type": "boolean"}]}},
    ],
}
ORDER_V2 = {**ORDER_V1, "fields": [
    *[f if f["name"] != "amount" else {"name": "amount", "type": "long"} for f in ORDER_V1["fields"]],
    {"name": "channel", "type": "string", "default": "web"},
    {"name": "note", "type": ["null", "string"], "default": None},
]}
TS = datetime(2026, 11, 1, 10, 0, 0, 123000, tzinfo=timezone.utc)
REF = "0b6a4c9e-8d6f-4b53-9d0a-5f1e2c3d4e5f"


def order(i: int, **more) -> dict:
    return {"order_id": f"o{i}", "amount": 100 + i, "ts": TS, "day": date(2026, 11, i),
            "price": Decimal(f"{i}.25"), "ref": REF, "customer": {"id": f"c{i}", "vip": i % 2 == 0},
            **more}


def serializer(stand_in, schema: dict):
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(registry_client(stand_in), json.dumps(schema),
                          conf={"auto.register.schemas": True})


def serialized(stand_in, topic: str, schema: dict, record: dict) -> bytes:
    from confluent_kafka.serialization import MessageField, SerializationContext

    return serializer(stand_in, schema)(record, SerializationContext(topic, MessageField.VALUE))


def avro_pipeline(pipeline, stand_in, **source):
    return replace(pipeline, source=replace(pipeline.source, format="avro", schema=None,
                                            registry=registry_spec(stand_in), **source))


@pytest.fixture(scope="module")
def avro_run(spark, kafka, registry, tmp_path_factory):
    """One topic with v1 and v2 records, an unknown schema id and a truncated record; one run."""
    from ingest.kafka.local_broker import create_topic
    from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid
    from tests.integration.conftest import Sender

    topic = f"avro-orders-{id(tmp_path_factory):x}"
    create_topic(kafka.client_config(), topic, partitions=1)
    root = tmp_path_factory.mktemp("avro")
    sender = Sender(kafka, topic)
    sender.send(serialized(registry, topic, ORDER_V1, order(1)), uid="v1-a")
    sender.send(serialized(registry, topic, ORDER_V1, order(2)), uid="v1-b")
    sender.send(serialized(registry, topic, ORDER_V2, order(3, channel="app", note="gift")), uid="v2-a")
    whole = serialized(registry, topic, ORDER_V2, order(4, channel="shop"))
    sender.send(whole, uid="v2-b")
    sender.send(b"\x00" + struct.pack(">I", 4242) + whole[5:], uid="unknown-id")
    sender.send(whole[:-6], uid="truncated")
    sender.flush()
    pipeline = Pipeline(
        name="avro_orders",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=(topic,)),
                      format="avro", registry=registry_spec(registry)),
        uid=Uid(header="message-id"), target=Target(path=str(root / "target")),
        checkpoint=str(root / "checkpoint"), dead_letter=DeadLetter(path=str(root / "dead")))
    reports = run_once(spark, pipeline, timeout=600)  # one run for the module: room for a busy machine
    return pipeline, reports, whole


def test_two_writer_versions_land_resolved_to_the_latest_reader(spark, avro_run):
    pipeline, _, _ = avro_run
    rows = {r._uid: r for r in table(spark, pipeline.target.path).collect()}
    assert sorted(rows) == ["v1-a", "v1-b", "v2-a", "v2-b"]
    assert (rows["v1-a"].channel, rows["v1-a"].note) == ("web", None)  # the v2 defaults
    assert (rows["v2-a"].channel, rows["v2-a"].note) == ("app", "gift")
    assert rows["v1-b"].amount == 102 and rows["v2-b"].amount == 104


def test_logical_types_become_spark_types(spark, avro_run):
    pipeline, _, _ = avro_run
    target = table(spark, pipeline.target.path)
    types = dict(target.dtypes)
    assert (types["amount"], types["ts"], types["day"], types["price"], types["ref"]) == \
        ("bigint", "timestamp", "date", "decimal(10,2)", "string")
    assert types["customer"] == "struct<id:string,vip:boolean>"
    row = target.where("_uid = 'v1-b'").selectExpr(
        "CAST(unix_micros(ts) AS BIGINT) AS micros", "day", "price", "ref", "customer.vip").first()
    assert row.micros == int(TS.timestamp() * 1_000_000)
    assert (row.day, row.price, row.ref, row.vip) == (date(2026, 11, 2), Decimal("2.25"), REF, True)


def test_unknown_schema_id_and_truncated_record_are_dead_letters(spark, avro_run):
    pipeline, reports, whole = avro_run
    dead = {r._offset: r for r in table(spark, pipeline.dead_letter.path).collect()}
    assert sorted(dead) == [4, 5]
    assert dead[4].stage == "decode" and "unknown schema id 4242" in dead[4].reason
    writer_id = struct.unpack(">I", whole[1:5])[0]
    assert dead[5].stage == "decode" and f"schema id {writer_id}" in dead[5].reason
    assert "truncated" in dead[5].reason
    assert bytes(dead[5].value) == whole[:-6]  # the evidence, as it came
    assert sum(r.summary.read for r in reports) == 6


def test_writer_schemas_are_fetched_once_per_run(avro_run, registry):
    _, _, whole = avro_run
    writer_id = struct.unpack(">I", whole[1:5])[0]
    assert registry.requests.count(f"/schemas/ids/{writer_id}") == 1


def test_a_registry_that_goes_down_mid_run_fails_the_batch_and_writes_nothing(
        spark, kafka, topic, pipeline):
    """The reader schema was fetched at start; the batch's writer id cannot be: the run
    fails naming the registry, and no record becomes a dead letter (the target made while
    the query started stays empty)."""
    from ingest.stream.query import start_query
    from tests.integration.conftest import REGISTRY_PASSWORD, REGISTRY_USER, Sender
    from tests.schema_registry_stand_in import StandInRegistry

    going = StandInRegistry(REGISTRY_USER, REGISTRY_PASSWORD).start()
    sender = Sender(kafka, topic)
    sender.send(serialized(going, topic, ORDER_V1, order(1)), uid="u-1")
    sender.flush()
    query, processor = start_query(spark, avro_pipeline(pipeline, going), once=True)
    going.stop()  # after the run has its reader schema, before the batch's writer schema
    from pyspark.errors import StreamingQueryException

    try:
        with pytest.raises(StreamingQueryException, match="did not answer for schema id 1"):
            query.awaitTermination(240)
    finally:
        query.stop()
    batch_id, _, error = processor.failure
    assert batch_id == 0 and "did not answer for schema id 1" in str(error)
    assert REGISTRY_PASSWORD not in str(error)
    processor.settle()
    from delta.tables import DeltaTable
    target = DeltaTable.forPath(spark, pipeline.target.path)  # made while the query started: empty
    assert [h.operation for h in target.history().select("operation").collect()] == ["CREATE TABLE"]
    assert target.toDF().count() == 0
    assert not DeltaTable.isDeltaTable(spark, pipeline.dead_letter.path)


def test_ingest_run_exits_1_when_the_registry_answers_401(kafka, topic, tmp_path, registry):
    from tests.integration.processes import IngestProcess, write_pipeline

    registry.register(f"{topic}-value", {"schema": json.dumps(ORDER_V1)})
    url_with_password = registry.url.replace("http://", "http://ingest-tests:wrong-pw@")
    pipeline_file = write_pipeline(tmp_path, topic, source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic]},
        "format": "avro", "schema": None, "registry": {"url": url_with_password}})
    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "run.log")
    assert run.wait(timeout=300) == 1, run.output()[-3000:]
    errors = [line for line in run.output().splitlines() if line.startswith("error: ")]
    assert errors and "answered HTTP 401" in errors[0] and "source.registry.auth" in errors[0]
    assert "ingest-tests:***@127.0.0.1" in errors[0]
    assert "wrong-pw" not in run.output()


def test_a_pattern_reads_each_topics_own_subject(spark, kafka, pipeline, registry, tmp_path):
    """A `${topic}` target and a registry without `subject`: each topic's reader schema is
    its own `<topic>-value` (TopicNameStrategy), so each table gets its own columns."""
    from ingest.kafka.local_broker import create_topic
    from ingest.spec.model import DeadLetter, KafkaSource, Target
    from tests.integration.conftest import Sender

    prefix = f"shop{id(tmp_path) % 10**6}"
    schemas = {"orders": ORDER_V1, "refunds": {"type": "record", "name": "Refund", "fields": [
        {"name": "order_id", "type": "string"}, {"name": "reason", "type": "string"}]}}
    for name, schema in schemas.items():
        topic = f"{prefix}.{name}"
        create_topic(kafka.client_config(), topic, partitions=1)
        record = order(1) if name == "orders" else {"order_id": "o1", "reason": "late"}
        sender = Sender(kafka, topic)
        sender.send(serialized(registry, topic, schema, record), uid=f"{name}-1")
        sender.flush()
    shop = replace(avro_pipeline(pipeline, registry,
                                 kafka=KafkaSource(kafka.bootstrap, pattern=rf"{prefix}\..*")),
                   target=Target(path=str(tmp_path / "tables" / "${topic}")),
                   dead_letter=DeadLetter(path=str(tmp_path / "dead" / "${topic}")))
    run_once(spark, shop, timeout=600)

    orders = table(spark, str(tmp_path / "tables" / f"{prefix}_orders"))
    refunds = table(spark, str(tmp_path / "tables" / f"{prefix}_refunds"))
    assert "customer" in orders.columns and "reason" not in orders.columns
    assert [(r._uid, r.reason) for r in refunds.collect()] == [("refunds-1", "late")]
    assert f"/subjects/{prefix}.orders-value/versions/latest" in registry.requests
    assert f"/subjects/{prefix}.refunds-value/versions/latest" in registry.requests
