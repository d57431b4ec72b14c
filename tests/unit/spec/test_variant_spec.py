"""`source.schema: variant` (issue 56): the record's JSON as one VARIANT column `payload`,
and `uid.field`, `uid.fields`, `target.order_by` and `target.dedup_horizon.column` naming
a path in it (`payload:order.id::string`), checked with file:line:key before anything runs
(ingest/spec/variant_path.py)."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from ingest.spec.variant_path import VariantPath, reference_sql
from tests.unit.spec.test_loader import ENVIRON, SETTINGS

VARIANT = """\
name: orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [orders]
  format: json
  schema: variant
uid:
  field: "payload:order.id::string"
target:
  path: ${DATA_ROOT}/tables/orders
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""


def load(text):
    return load_text(text, "p.yaml", environ=ENVIRON, settings=SETTINGS).pipeline


def problems(text) -> str:
    with pytest.raises(SpecErrors) as raised:
        load(text)
    return str(raised.value)


def test_a_variant_source_loads_with_a_uid_path_and_round_trips():
    pipeline = load(VARIANT)
    assert pipeline.source.variant
    assert pipeline.source.unknown_fields == "ignore"  # the VARIANT keeps every field
    assert pipeline.uid.field == "payload:order.id::string"
    assert load(to_yaml(to_document(pipeline))) == pipeline


def test_a_schema_named_variant_in_any_case_and_only_with_json_is_the_variant_payload():
    assert load(VARIANT.replace("schema: variant", "schema: VARIANT")).source.variant
    assert not load(VARIANT.replace("schema: variant", 'schema: "doc VARIANT, id STRING"')
                    .replace("payload:order.id::string", "id")).source.variant


def test_the_horizon_and_an_upserts_order_may_name_typed_paths():
    horizon = load(VARIANT.replace("  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n"
                                   "  dedup_horizon: {column: 'payload:ts::timestamp', within: 1 hour}\n"))
    assert horizon.target.dedup_horizon.column == "payload:ts::timestamp"
    upsert = load(VARIANT.replace("  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n"
                                  "  mode: upsert\n  order_by: 'payload:order.version::bigint'\n"))
    assert upsert.target.order_by == "payload:order.version::bigint"
    fields = load(VARIANT.replace('field: "payload:order.id::string"',
                                  "fields: ['payload:order.id', 'payload:[\"shop id\"]::int']"))
    assert fields.uid.fields == ("payload:order.id", 'payload:["shop id"]::int')


@pytest.mark.parametrize("path,sql", [
    ("payload:order.id::string", "try_variant_get(s.`payload`, '$.order.id', 'string')"),
    ("payload:order.id", "try_variant_get(s.`payload`, '$.order.id', 'string')"),
    ("payload:items[0].sku::STRING", "try_variant_get(s.`payload`, '$.items[0].sku', 'string')"),
    ("payload:['order id'].total::decimal(10, 2)",
     "try_variant_get(s.`payload`, '$[\"order id\"].total', 'decimal(10,2)')"),
    ("payload : ts :: timestamp", "try_variant_get(s.`payload`, '$.ts', 'timestamp')"),
])
def test_a_path_is_read_record_by_record_with_try_variant_get(path, sql):
    """try_variant_get, not `::`'s cast: under ANSI SQL a value that does not cast fails the
    whole batch; here it is null, and the record a uid dead letter naming the path."""
    assert reference_sql(path, "s") == sql
    assert VariantPath.parse(path).column == "payload"


def test_a_plain_column_is_a_quoted_column():
    assert reference_sql("order_id", "t") == "t.`order_id`"
    assert reference_sql("order_id") == "`order_id`"


@pytest.mark.parametrize("key,value,message", [
    ("uid.field", "payload:order..id::string", "'payload:order..id::string' is not a path in a VARIANT column: "
     "cannot read '..id' after 'order'; expected .name, ['name'] or [index] steps, e.g. payload:order.id::string"),
    ("uid.field", "payload:", "no path after ':'; expected"),
    ("uid.field", "payload:order.id::strng", "'strng' is not a type (did you mean 'string'?)"),
    ("uid.field", "payload:order.id::", "no type after '::'; expected"),
    ("uid.field", "doc:order.id", "'doc' is not a VARIANT column of the payload; expected payload:<path>"),
    ("uid.field", "payload:order['id", "cannot read \"['id\""),
])
def test_a_malformed_uid_path_names_file_line_and_key(key, value, message):
    text = problems(VARIANT.replace('"payload:order.id::string"', repr(value)))
    assert f"p.yaml:9: {key}: " in text and message in text, text


def test_a_horizon_path_must_be_a_timestamp_and_an_order_must_have_a_type():
    horizon = problems(VARIANT.replace("  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n"
                                       "  dedup_horizon: {column: 'payload:ts', within: 1 hour}\n"))
    assert "target.dedup_horizon.column: 'payload:ts' is read as STRING; expected a TIMESTAMP: end the path " \
           "with ::timestamp" in horizon, horizon
    order = problems(VARIANT.replace("  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n"
                                     "  mode: upsert\n  order_by: 'payload:version::variant'\n"))
    assert "target.order_by: 'payload:version::variant' is read as VARIANT, which has no order; expected a " \
           "type that orders, e.g. payload:version::bigint" in order, order
    untyped = problems(VARIANT.replace("  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n"
                                       "  mode: upsert\n  order_by: 'payload:version'\n"))
    assert "target.order_by: 'payload:version' has no type; expected the type to order by" in untyped, untyped


def test_a_path_without_a_variant_column_is_refused():
    text = problems(VARIANT.replace("schema: variant", 'schema: "order_id STRING"'))
    assert "p.yaml:9: uid.field: 'payload' is not a VARIANT column of the payload" in text, text


@pytest.mark.parametrize("extra,key,message", [
    ("  unknown_fields: warn\n", "source.unknown_fields",
     "the VARIANT payload keeps every field; expected no unknown_fields with schema: variant"),
    ("cdc: {key: [id]}\n", "source.schema",
     "cdc reads the row's columns from the envelope; expected a DDL schema with cdc, not variant"),
])
def test_what_a_variant_payload_does_not_take(extra, key, message):
    text = VARIANT + extra if extra.startswith("cdc") else VARIANT.replace("  schema: variant\n",
                                                                          "  schema: variant\n" + extra)
    if extra.startswith("cdc"):
        text = text.replace('uid:\n  field: "payload:order.id::string"\n', "").replace(
            "  path: ${DATA_ROOT}/tables/orders\n", "  path: ${DATA_ROOT}/tables/orders\n  mode: upsert\n")
    found = problems(text)
    assert f"{key}: " in found and message in found, found
