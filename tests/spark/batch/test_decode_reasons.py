"""A JSON record that does not fit the schema: its dead letter names the field, the value as
written and the type expected; and the reason costs nothing in the pass that counts the batch."""

import json

from pyspark.sql import functions as F

from ingest.batch.formats.decode import decode
from ingest.batch.merge.dead_letters import dead_letters
from ingest.batch.processor import slim
from ingest.batch.staged import REASON, STAGE
from ingest.spec.columns import UID

KAFKA_SCHEMA = ("topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, key BINARY, value BINARY, "
                "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
SCHEMA = ("shipment_id STRING NOT NULL, weight_kg DOUBLE, shipped_on DATE, "
          "dest STRUCT<city: STRING, zip: INT>, tags ARRAY<STRING>")


def raw(spark, *values: bytes):
    rows = [("shipments", 0, n, None, None, bytearray(v), []) for n, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def reasons(spark, *values: bytes) -> list:
    schema = spark.createDataFrame([], SCHEMA).schema
    decoded = decode(raw(spark, *values), "json", schema)
    return [r[REASON] for r in decoded.orderBy(F.col("__raw.offset")).collect()]


def record(**fields) -> bytes:
    return json.dumps({"shipment_id": "s1", **fields}).encode()


def test_a_bad_value_names_field_value_and_type(spark):
    got = reasons(spark, record(weight_kg="2,5 kg"), record(shipped_on="28/11/2026"),
                  record(dest={"city": "Lyon", "zip": "69OO1"}), record(tags="urgent"),
                  record(weight_kg=2.5, shipped_on="2026-11-28"))
    assert got[0] == "field weight_kg: value '2,5 kg' is not a DOUBLE (expected a JSON number, e.g. 2.5)"
    assert got[1] == ("field shipped_on: value '28/11/2026' is not a DATE (expected text yyyy-MM-dd, "
                      "e.g. \"2026-11-28\")")
    assert got[2] == "field dest.zip: value '69OO1' is not an INT (expected a JSON number, e.g. 7)"
    assert got[3].startswith("field tags: value 'urgent' is not an ARRAY<STRING>")
    assert got[4] is None


def test_broken_json_and_a_missing_required_field_say_so(spark):
    got = reasons(spark, b'{"shipment_id": "s1", "weight_kg": 2.5', json.dumps({"weight_kg": 1.0}).encode(),
                  b"[1, 2]")
    assert got[0] == "malformed JSON: '{\"shipment_id\": \"s1\", \"weight_kg\": 2.5'"
    assert got[1] == "missing required field 'shipment_id' (the column is NOT NULL)"
    assert got[2] == "not a JSON object: '[1, 2]'"


def test_the_dead_letter_row_carries_the_reason(spark):
    schema = spark.createDataFrame([], SCHEMA).schema
    decoded = decode(raw(spark, record(weight_kg="2,5 kg"), record(weight_kg=1.0)), "json", schema)
    rows = dead_letters(decoded.withColumn(UID, F.lit("u")), "shipments", 0).collect()
    assert [(r.stage, r.reason) for r in rows] == [
        ("decode", "field weight_kg: value '2,5 kg' is not a DOUBLE (expected a JSON number, e.g. 2.5)")]


def test_the_counting_pass_does_not_compute_the_reason(spark):
    """The summary's pass (the MERGE source, `slim`) reads the stage, never the reason: the
    field-by-field reason is computed only where dead letters are read again."""
    schema = spark.createDataFrame([], SCHEMA).schema
    decoded = decode(raw(spark, record(weight_kg="2,5 kg")), "json", schema).withColumn(UID, F.lit("u"))
    plan = slim(decoded)._jdf.queryExecution().executedPlan().toString()
    assert "from_json" in plan
    assert "get_json_object" not in plan
    assert slim(decoded).where(F.col(STAGE) == "decode").count() == 1


def policy(spark, unknown_fields: str, *values: bytes):
    schema = spark.createDataFrame([], SCHEMA).schema
    return decode(raw(spark, *values), "json", schema, unknown_fields).orderBy(F.col("__raw.offset"))


MISSPELT = json.dumps({"shipment_id": "s1", "weight": 2.5, "colour": "red"}).encode()


def test_unknown_fields_dead_letter_names_them_with_the_field_they_may_mean(spark):
    rows = policy(spark, "dead_letter", MISSPELT, record(weight_kg=2.5)).collect()
    assert [(r[STAGE], r[REASON]) for r in rows] == [
        ("decode", "fields the schema does not name: weight (did you mean weight_kg?), colour; expected only "
                   "the schema's fields (source.unknown_fields: dead_letter)"),
        (None, None)]


def test_unknown_fields_warn_merges_the_record_and_the_batch_counts_it(spark):
    from ingest.batch.processor import staged_records, summarize
    from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

    pipeline = Pipeline("shipments", Source(KafkaSource("localhost:9092", ("shipments",)), schema=SCHEMA),
                        Uid(coordinates=True), Target(path="/unused"), "/unused", DeadLetter(path="/unused"))
    decoded = policy(spark, "warn", MISSPELT, record(weight_kg=2.5), MISSPELT)
    assert [r[STAGE] for r in decoded.collect()] == [None, None, None]
    summary = summarize(slim(staged_records(decoded, pipeline)), pipeline)
    assert (summary.unknown_fields, summary.unknown_example) == (2, "weight, colour")
    ignored = summarize(slim(staged_records(policy(spark, "ignore", MISSPELT), pipeline)), pipeline)
    assert ignored.unknown_fields == 0


def test_a_missing_not_null_field_is_a_dead_letter_whatever_the_policy(spark):
    missing = json.dumps({"weight_kg": 2.5}).encode()
    for unknown_fields in ("ignore", "warn"):
        assert [r[REASON] for r in policy(spark, unknown_fields, missing).collect()] == [
            "missing required field 'shipment_id' (the column is NOT NULL)"]
