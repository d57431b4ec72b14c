"""`source.schema: variant` on a session, without a broker: each record one VARIANT column,
a malformed one a decode dead letter, a uid path that is missing or does not cast a uid dead
letter naming the path, and validate's Spark pass on paths after a transform."""

from __future__ import annotations

import hashlib
import json

from pyspark.sql import functions as F

from ingest.batch.processor import decode_records, payload_schema, staged_records
from ingest.batch.staged import REASON, STAGE
from ingest.spec.columns import UID
from ingest.spec.loader import load_text
from ingest.spec.settings import Settings
from ingest.spec.sql_check import check_sql
from tests.spark.batch.test_decode_reasons import raw

SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True,
                    vars={"KAFKA_BOOTSTRAP": "b:9092", "DATA_ROOT": "/data"})
PIPELINE = """\
name: orders
source:
  kafka: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", topics: [orders]}
  format: json
  schema: variant
transform:
  select: ["*", "payload:customer.name::string AS customer"]
uid:
  field: "payload:order.id::string"
target:
  path: ${DATA_ROOT}/tables/orders
  dedup_horizon: {column: "payload:ts::timestamp", within: 1 hour}
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""


def load(text: str = PIPELINE):
    return load_text(text, "orders.yaml", environ={}, settings=SETTINGS)


def staged(spark, *values: bytes, text: str = PIPELINE):
    pipeline = load(text).pipeline
    decoded = decode_records(raw(spark, *values), pipeline, payload_schema(spark, pipeline))
    return staged_records(decoded, pipeline).orderBy(F.col("__raw.offset"))


def test_records_decode_to_one_variant_column_and_the_uid_comes_from_its_path(spark):
    frame = staged(spark,
                   json.dumps({"order": {"id": "o1", "items": [{"sku": "a"}]}, "customer": {"name": "Ann"},
                               "ts": "2026-11-28T09:00:00Z"}).encode(),
                   json.dumps({"order": {"id": 7}}).encode(),
                   b'{"order": {"id": "o3"',
                   json.dumps({"order": {"no_id": 1}}).encode(),
                   json.dumps({"order": {"id": {"nested": True}}}).encode())
    assert frame.schema["payload"].dataType.typeName() == "variant"
    rows = frame.select(UID, STAGE, REASON, "customer", F.expr("payload:order.items[0].sku::string").alias("sku")) \
        .collect()
    assert [tuple(r) for r in rows[:2]] == [("o1", None, None, "Ann", "a"), ("7", None, None, None, None)]
    assert (rows[2][STAGE], rows[2][REASON]) == ("decode", "malformed JSON: '{\"order\": {\"id\": \"o3\"'")
    assert (rows[3][STAGE], rows[3][REASON]) == (
        "uid", "path payload:order.id::string is missing or null, or its value is not a string")
    # an object read as STRING is its JSON text: a uid still, the same for the same object
    assert (rows[4][UID], rows[4][STAGE]) == ('{"nested":true}', None)


def test_uid_fields_paths_hash_their_text_a_timestamp_as_its_utc_wall_clock(spark):
    fields = PIPELINE.replace('field: "payload:order.id::string"',
                              'fields: ["payload:order.id", "payload:ts::timestamp"]')
    frame = staged(spark, json.dumps({"order": {"id": "o1"}, "ts": "2026-11-28T09:00:00Z"}).encode(),
                   json.dumps({"order": {"id": "o2"}, "ts": "not a time"}).encode(), text=fields)
    rows = frame.select(UID, STAGE, REASON).collect()
    expected = hashlib.sha256("o1\u001f2026-11-28 09:00:00".encode()).hexdigest()
    assert (rows[0][UID], rows[0][STAGE]) == (expected, None)
    assert (rows[1][STAGE], rows[1][REASON]) == (
        "uid", "one of the fields payload:order.id, payload:ts::timestamp is missing or null (a path: or not "
        "of its type)")


def test_validate_reads_paths_after_the_transform_with_spark(spark):
    dropped = load(PIPELINE.replace('["*", ', '['))  # the transform keeps only `customer`
    found = dropped.place(check_sql(dropped.pipeline, spark))
    assert [(p.code, p.path, p.line) for p in found] == [
        ("bad_path", "uid.field", 9), ("bad_path", "target.dedup_horizon.column", 12)]
    assert "'payload' is not a column after transform; expected a VARIANT column" in found[0].message
    assert check_sql(load().pipeline, spark) == []
