"""Pipelines on Spark Connect, end to end: the broker, a Connect server in this process,
the batch function in the server's Python worker, Delta through SQL."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

import ingest
from tests.integration.processes import write_pipeline


@pytest.fixture
def bootstrap(kafka, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)  # the pipeline files read ${KAFKA_BOOTSTRAP}
    return kafka.bootstrap


def send(kafka, topic, records) -> None:
    """(uid, body, partition) each; a body that is bytes goes as it is."""
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "linger.ms": 20})
    for uid, body, partition in records:
        value = body if isinstance(body, bytes) else json.dumps(body).encode()
        producer.produce(topic, value, partition=partition, headers=[("message-id", uid)])
    assert producer.flush(60) == 0


def orders(count: int, amount: float = 1.0) -> list:
    return [(f"u{i:04d}", {"order_id": f"o{i}", "amount": amount, "ts": "2026-11-01T10:00:00"}, i % 2)
            for i in range(count)]


def rows(spark, path) -> dict:
    return {r._uid: r for r in spark.read.format("delta").load(str(path)).collect()}


def test_insert_only_json_with_retries_and_a_bad_record(connect_spark, kafka, topic, tmp_path, bootstrap):
    retried = orders(4)[:2]  # the producer's retries: the same uids again, at new offsets
    send(kafka, topic, orders(10) + retried + [("bad", b"{oops", 0)])
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_orders")

    [outcome] = ingest.run(connect_spark, pipeline_file, once=True)

    assert (outcome.pipeline, outcome.error) == ("connect_orders", None)
    assert outcome.batches >= 1
    target = rows(connect_spark, tmp_path / "tables" / "connect_orders")
    assert sorted(target) == [f"u{i:04d}" for i in range(10)]
    dead = connect_spark.read.format("delta").load(str(tmp_path / "dead_letter" / "connect_orders")).collect()
    assert [(d.stage, d.value) for d in dead] == [("decode", b"{oops")]

    [again] = ingest.run(connect_spark, pipeline_file, once=True)  # nothing new: nothing changes
    assert again.error is None
    assert rows(connect_spark, tmp_path / "tables" / "connect_orders").keys() == target.keys()
    audit = ingest.verify(connect_spark, pipeline_file)
    assert (audit.ok, audit.target_rows, audit.dead_letters, audit.duplicates) == (True, 10, 1, 0)
