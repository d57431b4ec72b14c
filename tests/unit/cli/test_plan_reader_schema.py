"""`ingest plan` of an avro pipeline shows the registry's reader schema as Spark DDL,
credentials masked; a registry that does not answer is said, not hidden."""

from __future__ import annotations

import json

import pytest

from ingest.cli import main
from tests.schema_registry_stand_in import StandInRegistry

ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": ["null", "string"], "default": None}]}

PIPELINE = """\
name: orders_avro
source:
  kafka: {bootstrap_servers: localhost:9092, topics: [orders]}
  format: avro
  registry:
    url: ${SCHEMA_REGISTRY_URL}
    auth: {basic: "svc:${SR_PASSWORD}"}
uid: {field: order_id}
target: {path: /data/tables/orders_avro}
checkpoint: /data/checkpoints/orders_avro
"""


@pytest.fixture
def stand_in():
    registry = StandInRegistry("svc", "pw-42-secret").start()
    registry.register("orders-value", {"schema": json.dumps(ORDER)})
    yield registry
    registry.stop()


def plan(tmp_path, monkeypatch, capsys, url, password="pw-42-secret", text=PIPELINE):
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", url)
    monkeypatch.setenv("SR_PASSWORD", password)
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path))
    file = tmp_path / "orders_avro.yaml"
    file.write_text(text)
    code = main(["plan", str(file)])
    return code, capsys.readouterr().out


def test_plan_shows_the_reader_schema_as_ddl(tmp_path, monkeypatch, capsys, stand_in):
    code, out = plan(tmp_path, monkeypatch, capsys, stand_in.url)
    assert code == 0
    assert "Reader schema (Spark DDL):\n  subject orders-value, version latest:\n" \
           "  `order_id` STRING NOT NULL, `ts` TIMESTAMP NOT NULL, `note` STRING\n" in out
    assert "pw-42-secret" not in out


def test_plan_says_when_the_registry_refuses(tmp_path, monkeypatch, capsys, stand_in):
    code, out = plan(tmp_path, monkeypatch, capsys, stand_in.url, password="wrong-pw")
    assert code == 0
    assert "not available (schema registry" in out and "HTTP 401" in out
    assert "wrong-pw" not in out


def test_a_table_per_topic_shows_each_topics_own_subject(tmp_path, monkeypatch, capsys, stand_in):
    stand_in.register("refunds-value", {"schema": json.dumps(
        {"type": "record", "name": "Refund", "fields": [{"name": "reason", "type": "string"}]})})
    text = PIPELINE.replace("topics: [orders]", "topics: [orders, refunds]").replace(
        "{path: /data/tables/orders_avro}", "{path: \"/data/tables/${topic}\"}")
    code, out = plan(tmp_path, monkeypatch, capsys, stand_in.url, text=text)
    assert code == 0
    assert "  subject <topic>-value per topic (<topic>: the topic's name), version latest\n" \
           "  subject orders-value, version latest:\n  `order_id` STRING NOT NULL, `ts`" in out
    assert "  subject refunds-value, version latest:\n  `reason` STRING NOT NULL\n" in out
