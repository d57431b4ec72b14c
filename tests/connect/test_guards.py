"""`validate`'s Spark guards hold on Spark Connect as on a classic session: the client
has no JVM to walk the plan, so they read the analysed plan the server's explain sends."""

from __future__ import annotations

import pytest

from ingest.spec.loader import load_text
from ingest.spec.settings import Settings
from ingest.spec.sql_check import check_sql

SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True,
                    vars={"KAFKA_BOOTSTRAP": "b:9092", "DATA_ROOT": "/data"})
PIPELINE = """\
name: orders
source:
  kafka: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", topics: [orders]}
  format: json
  schema: "order_id STRING, amount DOUBLE, ts TIMESTAMP"
transform:
  select: SELECT_LIST
uid:
  fields: [order_id, id]
target: {path: "${DATA_ROOT}/tables/orders"}
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""


def problems(spark, select: list[str]) -> list[tuple[str, str, str]]:
    text = PIPELINE.replace("SELECT_LIST", "[" + ", ".join(f'"{s}"' for s in select) + "]")
    loaded = load_text(text, "orders.yaml", environ={}, settings=SETTINGS)
    return [(p.code, p.path, p.message) for p in check_sql(loaded.pipeline, spark)]


@pytest.mark.parametrize(("select", "cause"), [
    (["*", "uuid() AS id"], "uuid()"),
    (["*", "CAST(rand() * 1000 AS INT) AS id"], "rand()"),
    (["*", "uuid() AS raw_id", "raw_id AS id"], "uuid()"),
])
def test_a_uid_that_changes_on_a_replay_is_refused(connect_spark, select, cause):
    [(code, path, message)] = problems(connect_spark, select)
    assert (code, path) == ("bad_sql", "uid")
    assert f"'id' comes from {cause}" in message


@pytest.mark.parametrize(("select", "what"), [
    (["*", "explode(array(1, 2)) AS id"], "a generator"),
    (["*", "row_number() OVER (ORDER BY ts) AS id"], "a window function"),
])
def test_a_transform_that_changes_the_row_count_is_refused(connect_spark, select, what):
    found = problems(connect_spark, select)
    assert [(code, path) for code, path, _ in found] == [("bad_sql", "transform.select[1]")]
    assert what in found[0][2]


def test_a_uid_from_the_record_is_accepted(connect_spark):
    assert problems(connect_spark, ["*", "upper(order_id) AS id"]) == []
