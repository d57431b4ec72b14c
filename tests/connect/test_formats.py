"""Avro and Protobuf on Spark Connect, the records made as the classic tests make them:
the Confluent wire format (confluent-kafka's serializers against the registry stand-in),
and plain Protobuf records read with a local .proto; decoded in an Arrow UDF in the
server's Python worker."""

from __future__ import annotations

import struct

import pytest

import ingest
from tests.integration.conftest import REGISTRY_PASSWORD, REGISTRY_USER, Sender
from tests.integration.processes import write_pipeline
from tests.integration.test_avro import ORDER_V1, ORDER_V2, TS
from tests.integration.test_avro import order as avro_order
from tests.integration.test_avro import serialized as avro_serialized
from tests.integration.test_protobuf import assert_orders_landed, produce_orders
from tests.integration.test_protobuf import order as proto_order
from tests.integration.test_protobuf import serialized as proto_serialized
from tests.protobuf_messages import message_classes


@pytest.fixture(scope="module")
def registry():
    """The classic suite's stand-in (tests/integration/conftest.py), basic auth on."""
    from tests.schema_registry_stand_in import StandInRegistry

    stand_in = StandInRegistry(REGISTRY_USER, REGISTRY_PASSWORD).start()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def bootstrap(kafka, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)  # the pipeline files read ${KAFKA_BOOTSTRAP}
    return kafka.bootstrap


def registry_pipeline(tmp_path, topic, name: str, fmt: str, registry):
    return write_pipeline(tmp_path, topic, name=name, source={
        "format": fmt, "schema": None,
        "registry": {"url": registry.url, "auth": {"basic": f"{REGISTRY_USER}:{REGISTRY_PASSWORD}"}}})


def run_and_check(spark, pipeline_file, tmp_path, name: str, uids: list[str], malformed: bytes) -> dict:
    """One run: every uid once, the malformed record the one dead letter (stage decode, its
    bytes kept), `verify` OK; the target's rows by uid."""
    [outcome] = ingest.run(spark, pipeline_file, once=True)

    assert (outcome.pipeline, outcome.error) == (name, None)
    target = {r._uid: r for r in spark.read.format("delta").load(str(tmp_path / "tables" / name)).collect()}
    assert sorted(target) == sorted(uids)
    [dead] = spark.read.format("delta").load(str(tmp_path / "dead_letter" / name)).collect()
    assert (dead.stage, bytes(dead.value)) == ("decode", malformed)
    audit = ingest.verify(spark, pipeline_file)
    assert (audit.ok, audit.target_rows, audit.dead_letters, audit.duplicates) == (True, len(uids), 1, 0)
    return target


def test_avro_through_the_registry_with_a_retry_and_a_truncated_record(connect_spark, kafka, topic, tmp_path,
                                                                       bootstrap, registry):
    sender = Sender(kafka, topic)
    first = avro_serialized(registry, topic, ORDER_V1, avro_order(1))
    sender.send(first, uid="v1-a")
    sender.send(avro_serialized(registry, topic, ORDER_V1, avro_order(2)), uid="v1-b", partition=1)
    sender.send(avro_serialized(registry, topic, ORDER_V2, avro_order(3, channel="app")), uid="v2-a")
    whole = avro_serialized(registry, topic, ORDER_V2, avro_order(4, channel="shop"))
    sender.send(whole, uid="v2-b", partition=1)
    sender.send(first, uid="v1-a", partition=1)  # the producer's retry: the same uid at a new offset
    truncated = whole[:-6]
    sender.send(truncated, uid="truncated")
    sender.flush()
    pipeline_file = registry_pipeline(tmp_path, topic, "connect_avro", "avro", registry)

    rows = run_and_check(connect_spark, pipeline_file, tmp_path, "connect_avro",
                         ["v1-a", "v1-b", "v2-a", "v2-b"], truncated)

    assert (rows["v1-a"].channel, rows["v2-a"].channel) == ("web", "app")  # v1 read with v2's default
    assert (rows["v2-b"].amount, rows["v1-b"].customer.vip) == (104, True)
    micros = connect_spark.read.format("delta").load(str(tmp_path / "tables" / "connect_avro")) \
        .where("_uid = 'v1-a'").selectExpr("unix_micros(ts) AS m").first().m
    assert micros == int(TS.timestamp() * 1_000_000)  # timestamp-millis, through the Arrow UDF


def test_protobuf_through_the_registry_with_a_retry_and_a_truncated_record(connect_spark, kafka, topic, tmp_path,
                                                                           bootstrap, registry):
    v1, v2 = message_classes(1), message_classes(2)
    sender = Sender(kafka, topic)
    first = proto_serialized(registry, topic, proto_order(v1, 1))
    sender.send(first, uid="p-1")
    sender.send(proto_serialized(registry, topic, proto_order(v2, 2, channel="app")), uid="p-2", partition=1)
    sender.send(first, uid="p-1", partition=1)  # the producer's retry: the same uid at a new offset
    # the last field (status, a varint) keeps its tag and loses its value
    truncated = first[:-1]
    assert struct.unpack(">I", truncated[1:5]) == struct.unpack(">I", first[1:5])  # still framed
    sender.send(truncated, uid="truncated")
    sender.flush()
    pipeline_file = registry_pipeline(tmp_path, topic, "connect_protobuf", "protobuf", registry)

    rows = run_and_check(connect_spark, pipeline_file, tmp_path, "connect_protobuf", ["p-1", "p-2"], truncated)

    assert (rows["p-1"].customer.id, rows["p-1"].customer.vip, rows["p-1"].status) == ("c1", True, "PAID")
    assert (rows["p-1"].channel, rows["p-2"].channel) == ("", "app")  # proto3: absent is the default
    assert rows["p-2"].amount == 20 and rows["p-2"].tags == ["t2"]


def test_protobuf_with_a_proto_schema_file_with_retries_and_a_broken_record(connect_spark, kafka, topic, tmp_path,
                                                                            bootstrap):
    produce_orders(kafka, topic, tmp_path)  # no --registry: plain message bytes, the uid from order_id
    produce_orders(kafka, topic, tmp_path)  # the producer's retries: the same uids at new offsets
    broken = b"\x0a\xff\x01o"  # field 1 says 255 bytes follow; 1 does
    sender = Sender(kafka, topic)
    sender.send(broken, uid="broken")
    sender.flush()
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_proto_file", source={
        "format": "protobuf", "schema": None, "schema_file": str(tmp_path / "order.proto"),
        "message": "shop.Order"})

    run_and_check(connect_spark, pipeline_file, tmp_path, "connect_proto_file", ["o1", "o2"], broken)

    assert_orders_landed(connect_spark, ingest.load(pipeline_file))
