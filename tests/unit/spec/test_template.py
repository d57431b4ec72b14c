"""`${topic}` target templates: loaded as written, rendered per topic, rejected elsewhere."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec import template
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from tests.unit.spec.test_errors import TEST_ENVIRON, TEST_SETTINGS

PER_TOPIC = """\
name: shop
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    pattern: "shop\\\\..*"
  format: json
  schema: "order_id STRING, amount DOUBLE"
  schemas:
    shop.refunds: "refund_id STRING, amount DOUBLE"
uid:
  header: message-id
target:
  path: ${DATA_ROOT}/tables/${topic}
checkpoint: ${DATA_ROOT}/checkpoints/shop
"""


def load(text):
    return load_text(text, "shop.yaml", environ=TEST_ENVIRON, settings=TEST_SETTINGS).pipeline


def problems(text):
    with pytest.raises(SpecErrors) as raised:
        load(text)
    return raised.value.problems


def test_the_template_is_kept_and_the_dead_letters_follow_it():
    pipeline = load(PER_TOPIC)
    assert pipeline.target.path == "/data/tables/${topic}"
    assert pipeline.dead_letter.path == "/data/tables/${topic}_dead_letter"
    assert template.is_per_topic(pipeline)


def test_a_topic_gets_its_own_tables_and_schema():
    pipeline = load(PER_TOPIC)
    refunds = template.for_topic(pipeline, "shop.refunds")
    assert refunds.target.path == "/data/tables/shop_refunds"
    assert refunds.dead_letter.path == "/data/tables/shop_refunds_dead_letter"
    assert refunds.source.schema == "refund_id STRING, amount DOUBLE"
    assert template.for_topic(pipeline, "shop.orders").source.schema == "order_id STRING, amount DOUBLE"
    assert refunds.checkpoint == pipeline.checkpoint and refunds.name == pipeline.name


def test_a_catalog_table_name_gets_a_valid_identifier():
    pipeline = load(PER_TOPIC.replace("  path: ${DATA_ROOT}/tables/${topic}", "  table: main.shop.${topic}"))
    assert template.for_topic(pipeline, "shop.orders-eu").target.table == "main.shop.shop_orders_eu"


def test_plan_document_loads_back_with_the_template():
    pipeline = load(PER_TOPIC)
    text = to_yaml(to_document(pipeline))
    assert "/data/tables/${topic}" in text
    assert load(text) == pipeline


def test_a_single_target_is_not_per_topic():
    pipeline = load(PER_TOPIC.replace("/${topic}", "/shop").replace(
        "  schemas:\n    shop.refunds: \"refund_id STRING, amount DOUBLE\"\n", ""))
    assert not template.is_per_topic(pipeline)


def test_unknown_template_variable_names_the_known_one():
    [problem] = problems(PER_TOPIC.replace("tables/${topic}", "tables/${topik}"))
    assert (problem.code, problem.path, problem.line) == ("unknown_template", "target.path", 13)
    assert problem.render().startswith("shop.yaml:13: target.path: ${topik} is not a template variable")
    assert problem.message.endswith("expected ${topic} (did you mean '${topic}'?)")


def test_a_default_on_the_template_is_rejected():
    [problem] = problems(PER_TOPIC.replace("tables/${topic}", "tables/${topic:-x}"))
    assert (problem.code, problem.path) == ("unknown_template", "target.path")


def test_an_environment_variable_in_the_target_still_resolves():
    pipeline = load(PER_TOPIC.replace("tables/${topic}", "${lower_root:-x}/${topic}"))
    assert pipeline.target.path == "/data/x/${topic}"


def test_a_pattern_with_a_schema_per_topic_needs_topic_in_the_target():
    [problem] = problems(PER_TOPIC.replace("tables/${topic}", "tables/shop"))
    assert (problem.code, problem.path, problem.line) == ("template_rules", "source.schemas", 8)
    assert "expected ${topic} in target.path, e.g. /data/tables/shop/${topic}" in problem.message


def test_a_schema_for_a_topic_the_pattern_does_not_match():
    [problem] = problems(PER_TOPIC.replace("shop.refunds:", "refunds:"))
    assert (problem.code, problem.path) == ("bad_value", "source.schemas.refunds")


def test_topics_that_render_alike_share_one_table():
    pipeline = load(PER_TOPIC)
    assert template.tables_of(pipeline, ["shop.b", "shop_b", "shop.a"]) == {
        "/data/tables/shop_a": ["shop.a"], "/data/tables/shop_b": ["shop.b", "shop_b"]}


def test_table_threads_sets_how_many_tables_commit_at_once(monkeypatch):
    from ingest.batch.routing import TopicRouter

    monkeypatch.delenv("INGEST_TABLE_THREADS", raising=False)
    pipeline = load(PER_TOPIC + "table_threads: 3\n")
    assert pipeline.operations.table_threads == 3
    assert to_document(pipeline)["table_threads"] == 3 and load(to_yaml(to_document(pipeline))) == pipeline
    assert TopicRouter(pipeline).threads == 3
    assert TopicRouter(load(PER_TOPIC)).threads == 8
    monkeypatch.setenv("INGEST_TABLE_THREADS", "1")  # the bench's and tests' override
    assert TopicRouter(pipeline).threads == 1


def test_table_threads_needs_a_per_topic_target_and_a_whole_number():
    [problem] = problems(PER_TOPIC.replace("tables/${topic}", "tables/shop").replace(
        "  schemas:\n    shop.refunds: \"refund_id STRING, amount DOUBLE\"\n", "") + "table_threads: 4\n")
    assert (problem.code, problem.path) == ("template_rules", "table_threads")
    assert "table_threads applies only with ${topic} in target.path" in problem.message
    [problem] = problems(PER_TOPIC + "table_threads: 0\n")
    assert (problem.path, problem.line) == ("table_threads", 15)
