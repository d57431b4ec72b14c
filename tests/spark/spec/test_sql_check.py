"""Spark's parser and analyzer on schema DDL and transform SQL, placed on lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.spec.loader import load_file, load_text
from ingest.spec.settings import Settings, load_settings
from ingest.spec.sql_check import check_sql, output_schema, parse_schema

SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True,
                    vars={"KAFKA_BOOTSTRAP": "b:9092", "DATA_ROOT": "/data"})

BASE = """\
name: orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [orders]
  format: json
  schema: "order_id STRING, amount DOUBLE, ts TIMESTAMP"
transform:
  select: ["*", "to_date(ts) AS order_date"]
  where: "amount IS NOT NULL"
uid:
  header: message-id
target:
  path: ${DATA_ROOT}/tables/orders
  partition_by: [order_date]
  dedup_horizon: {column: ts, within: 1 hour}
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""


def problems(spark, old: str = "", new: str = ""):
    """(code, path, line) of each problem, and the placed problems themselves."""
    assert old in BASE
    loaded = load_text(BASE.replace(old, new, 1), "orders.yaml", environ={}, settings=SETTINGS)
    placed = loaded.place(check_sql(loaded.pipeline, spark))
    return [(p.code, p.path, p.line) for p in placed], placed


@pytest.mark.parametrize("path", sorted(Path("pipelines").glob("*.yaml")), ids=lambda p: p.stem)
def test_examples_pass(spark, path):
    loaded = load_file(path, environ={}, settings=load_settings("local", "conf"))
    assert check_sql(loaded.pipeline, spark) == []


CASES = [
    ("bad_type", "amount DOUBLE", "amount DUBLE", "bad_ddl", "source.schema", 7),
    ("ddl_syntax", "amount DOUBLE,", "amount DOUBLE", "bad_ddl", "source.schema", 7),
    ("ddl_same_column_twice", "amount DOUBLE", "amount DOUBLE, AMOUNT INT", "bad_ddl",
     "source.schema", 7),
    ("unknown_column", '"to_date(ts) AS order_date"', '"to_date(tss) AS order_date"', "bad_sql",
     "transform.select[1]", 9),
    ("unknown_function", '"to_date(ts) AS order_date"', '"to_dat(ts) AS order_date"', "bad_sql",
     "transform.select[1]", 9),
    ("select_syntax", '"to_date(ts) AS order_date"', '"to_date(ts AS order_date"', "bad_sql",
     "transform.select[1]", 9),
    ("aggregate", '"to_date(ts) AS order_date"', '"count(*) AS order_date"', "bad_sql",
     "transform.select[1]", 9),
    ("generator", '"to_date(ts) AS order_date"', '"explode(array(ts)) AS order_date"', "bad_sql",
     "transform.select[1]", 9),
    ("same_output_twice", '"to_date(ts) AS order_date"', '"to_date(ts) AS amount"', "bad_sql",
     "transform.select", 9),
    ("where_not_boolean", '"amount IS NOT NULL"', '"amount"', "bad_sql", "transform.where", 10),
    ("where_syntax", '"amount IS NOT NULL"', '"amount >"', "bad_sql", "transform.where", 10),
    ("where_on_a_derived_column", '"amount IS NOT NULL"', '"order_date IS NOT NULL"', "bad_sql",
     "transform.where", 10),
    ("partition_column_gone", "[order_date]", "[order_day]", "bad_column",
     "target.partition_by[0]", 15),
    ("horizon_not_a_timestamp", "column: ts", "column: order_date", "bad_column",
     "target.dedup_horizon", 16),
    ("ingest_column", '"to_date(ts) AS order_date"', '"order_id AS _offset"', "bad_column",
     "transform.select", 9),
]


@pytest.mark.parametrize("old, new, code, path, line", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_spark_finds_the_problem_at_its_key_and_line(spark, old, new, code, path, line):
    found, _ = problems(spark, old, new)
    assert (code, path, line) in found


def test_a_misspelt_type_gets_a_suggestion(spark):
    _, [problem] = problems(spark, "amount DOUBLE", "amount DUBLE")
    assert "Unsupported data type" in problem.message
    assert problem.message.endswith("(did you mean 'DOUBLE'?)")
    assert "SQLSTATE" not in problem.message


def test_a_misspelt_function_gets_a_suggestion(spark):
    _, [problem] = problems(spark, '"to_date(ts) AS order_date"', '"to_dat(ts) AS order_date"')
    assert problem.message.endswith("(did you mean 'to_date'?)")


def test_a_failed_expression_does_not_cascade_into_column_problems(spark):
    found, _ = problems(spark, '"to_date(ts) AS order_date"', '"to_dat(ts) AS order_date"')
    assert [code for code, _, _ in found] == ["bad_sql"]


def test_every_bad_expression_is_reported(spark):
    found, _ = problems(spark, '"to_date(ts) AS order_date"',
                        '"amont * 2 AS x", "to_date(ts) AS order_date", "foo(1) AS y"')
    assert [path for _, path, _ in found] == ["transform.select[1]", "transform.select[3]"]


def test_lateral_alias_is_accepted(spark):
    found, _ = problems(spark, '"to_date(ts) AS order_date"',
                        '"amount * 100 AS cents", "cents + 1 AS more", "to_date(ts) AS order_date"')
    assert found == []


def test_string_format_payload_is_value(spark):
    text = BASE.replace('  schema: "order_id STRING, amount DOUBLE, ts TIMESTAMP"\n', "") \
        .replace("format: json", "format: string") \
        .replace('select: ["*", "to_date(ts) AS order_date"]',
                 'select: ["*", "get_json_object(value, \'$.ts\')::timestamp AS ts", '
                 '"to_date(ts) AS order_date"]') \
        .replace('"amount IS NOT NULL"', '"value IS NOT NULL"')
    loaded = load_text(text, "s.yaml", environ={}, settings=SETTINGS)
    assert check_sql(loaded.pipeline, spark) == []


def test_output_schema_and_parse_schema(spark):
    loaded = load_text(BASE, "orders.yaml", environ={}, settings=SETTINGS)
    assert output_schema(spark, loaded.pipeline).fieldNames() == \
        ["order_id", "amount", "ts", "order_date"]
    assert parse_schema(spark, "a INT, b STRING").fieldNames() == ["a", "b"]


def test_a_topic_schema_is_checked_at_its_own_key(spark):
    found, _ = problems(spark, "  path: ${DATA_ROOT}/tables/orders",
                        "  path: ${DATA_ROOT}/tables/${topic}")
    assert found == []
    per_topic = BASE.replace("topics: [orders]", "topics: [orders, refunds]").replace(
        "  path: ${DATA_ROOT}/tables/orders", "  path: ${DATA_ROOT}/tables/${topic}").replace(
        '  schema: "order_id STRING, amount DOUBLE, ts TIMESTAMP"',
        '  schema: "order_id STRING, amount DOUBLE, ts TIMESTAMP"\n'
        '  schemas: {refunds: "refund_id STRING, amount DUBLE, ts TIMESTAMP"}')
    loaded = load_text(per_topic, "orders.yaml", environ={}, settings=SETTINGS)
    placed = loaded.place(check_sql(loaded.pipeline, spark))
    assert [(p.code, p.path, p.line) for p in placed] == [("bad_ddl", "source.schemas.refunds", 8)]


@pytest.mark.parametrize("expression, cause", [
    ("uuid() AS id", "uuid()"),
    ("CAST(rand() * 1000 AS INT) AS id", "rand("),
    ("concat(order_id, CAST(current_timestamp() AS STRING)) AS id", "current_timestamp()"),
    ("uuid() AS raw_id\", \"raw_id AS id", "uuid()"),  # reaches the uid through a later alias
])
def test_a_uid_that_changes_on_a_replay_is_refused(spark, expression, cause):
    select = f'"*", "{expression}", "to_date(ts) AS order_date"'
    found, _ = problems(spark, '"*", "to_date(ts) AS order_date"', select)
    assert found == []  # a changing column that is not the uid is fine
    found, [problem] = _with_uid(spark, select)
    assert [(code, path) for code, path, _ in found] == [("bad_sql", "uid")]
    assert "'id' comes from " in problem.message and cause in problem.message.lower()


def _with_uid(spark, select: str):
    text = BASE.replace('"*", "to_date(ts) AS order_date"', select).replace(
        "header: message-id", "fields: [order_id, id]")
    loaded = load_text(text, "orders.yaml", environ={}, settings=SETTINGS)
    placed = loaded.place(check_sql(loaded.pipeline, spark))
    return [(p.code, p.path, p.line) for p in placed], placed


def test_a_uid_from_the_record_is_accepted(spark):
    found, _ = _with_uid(spark, '"*", "upper(order_id) AS id", "to_date(ts) AS order_date"')
    assert found == []
