"""Broken specs: each mistake is reported with its code, key path and line."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec.loader import load_text
from ingest.spec.settings import Settings

TEST_ENVIRON = {"KAFKA_BOOTSTRAP": "localhost:9092", "DATA_ROOT": "/data"}
TEST_SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True,
                         secret_names=frozenset({"KAFKA_JAAS_CONFIG"}))

# A valid spec; the line numbers in CASES refer to it.
BASE = """\
name: orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [orders]
    starting_offsets: earliest
    max_offsets_per_trigger: 1000
  format: json
  schema: "order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP"
transform:
  select: ["*", "amount * 100 AS cents"]
  where: "amount IS NOT NULL"
uid:
  header: message-id
target:
  path: ${DATA_ROOT}/tables/orders
  mode: insert_only
  partition_by: []
  dedup_horizon:
    column: ts
    within: "1 hour"
checkpoint: ${DATA_ROOT}/checkpoints/orders
dead_letter:
  path: ${DATA_ROOT}/dead_letter/orders
trigger:
  available_now: true
spark_conf: {}
"""


NO_TRANSFORM = """transform:
  select: ["*", "amount * 100 AS cents"]
  where: "amount IS NOT NULL"
"""
NO_TRANSFORM_GONE = "# no transform: columns are checked against the schema\n#\n#\n"


def broken(old: str, new: str) -> str:
    assert BASE.count(old) == 1, old
    return BASE.replace(old, new)


def problems_of(text: str, environ=None):
    with pytest.raises(SpecErrors) as raised:
        load_text(text, "orders.yaml", environ=environ or TEST_ENVIRON, settings=TEST_SETTINGS)
    return raised.value.problems


# (id, old, new, code, key path, line)
CASES = [
    ("syntax_unclosed_list", "topics: [orders]", "topics: [orders", "yaml_syntax", "", 6),
    ("syntax_bad_indent", "  format: json", " format: json", "yaml_syntax", "", 8),
    ("unknown_key_top", "checkpoint:", "checkpont:", "unknown_key", "checkpont", 22),
    ("unknown_key_source", "format: json", "formt: json", "unknown_key", "source.formt", 8),
    ("unknown_key_kafka", "topics: [orders]", "topcs: [orders]", "unknown_key",
     "source.kafka.topcs", 5),
    ("unknown_key_transform", "where:", "wher:", "unknown_key", "transform.wher", 12),
    ("unknown_key_uid", "header: message-id", "heder: message-id", "unknown_key", "uid.heder", 14),
    ("unknown_key_target", "partition_by: []", "partition: []", "unknown_key",
     "target.partition", 18),
    ("unknown_key_horizon", "column: ts", "colum: ts", "unknown_key",
     "target.dedup_horizon.colum", 20),
    ("unknown_key_dead_letter", "  path: ${DATA_ROOT}/dead_letter/orders",
     "  pth: ${DATA_ROOT}/dead_letter/orders", "unknown_key", "dead_letter.pth", 24),
    ("unknown_key_trigger", "available_now: true", "available_nw: true", "unknown_key",
     "trigger.available_nw", 26),
    ("wrong_type_integer", "max_offsets_per_trigger: 1000", "max_offsets_per_trigger: lots",
     "wrong_type", "source.kafka.max_offsets_per_trigger", 7),
    ("wrong_type_list", "topics: [orders]", "topics: orders", "wrong_type",
     "source.kafka.topics", 5),
    ("wrong_type_boolean", "starting_offsets: earliest", 'allow_data_loss: "true"', "wrong_type",
     "source.kafka.allow_data_loss", 6),
    ("wrong_type_section", "  header: message-id", "  - message-id", "wrong_type", "uid", 13),
    ("wrong_type_within_number", 'within: "1 hour"', "within: 3600", "wrong_type",
     "target.dedup_horizon.within", 21),
    ("yaml_boolean_in_list", "topics: [orders]", "topics: [no]", "yaml_boolean",
     "source.kafka.topics[0]", 5),
    ("yaml_boolean_header", "header: message-id", "header: on", "yaml_boolean", "uid.header", 14),
    ("yaml_date", "checkpoint: ${DATA_ROOT}/checkpoints/orders", "checkpoint: 2024-01-01",
     "yaml_date", "checkpoint", 22),
    ("duplicate_key", "  mode: insert_only", "  mode: insert_only\n  mode: upsert",
     "duplicate_key", "target.mode", 18),
    ("two_uid_rules", "header: message-id", "header: message-id\n  field: order_id", "uid_rules",
     "uid.field", 15),
    ("no_uid_rule", "header: message-id", "coordinates: false", "uid_rules", "uid", 13),
    ("bad_enum_mode", "mode: insert_only", "mode: upsrt", "bad_enum", "target.mode", 17),
    ("bad_enum_format", "format: json", "format: jsn", "bad_enum", "source.format", 8),
    ("max_share_above_one", "  path: ${DATA_ROOT}/dead_letter/orders",
     "  path: ${DATA_ROOT}/dead_letter/orders\n  max_share: 50", "bad_value", "dead_letter.max_share", 25),
    ("max_share_percent", "  path: ${DATA_ROOT}/dead_letter/orders",
     "  path: ${DATA_ROOT}/dead_letter/orders\n  max_share: 50%", "bad_value", "dead_letter.max_share", 25),
    ("bad_enum_unknown_fields", "  format: json", "  format: json\n  unknown_fields: warm", "bad_enum",
     "source.unknown_fields", 9),
    ("unknown_fields_not_json", "  format: json", "  format: string\n  unknown_fields: warn", "schema_rules",
     "source.unknown_fields", 9),
    ("bad_enum_isolation", "starting_offsets: earliest", "isolation_level: read_comitted",
     "bad_enum", "source.kafka.isolation_level", 6),
    ("bad_enum_starting", "starting_offsets: earliest", "starting_offsets: earlist", "bad_enum",
     "source.kafka.starting_offsets", 6),
    ("bad_offset", "starting_offsets: earliest", "starting_offsets: {orders: {0: -5}}",
     "bad_offsets", "source.kafka.starting_offsets.orders.0", 6),
    ("offsets_unsubscribed_topic", "starting_offsets: earliest",
     "starting_offsets: {ordrs: {0: 5}}", "bad_offsets", "source.kafka.starting_offsets.ordrs", 6),
    ("bad_name", "name: orders", "name: Orders-1", "bad_name", "name", 1),
    ("bad_within", 'within: "1 hour"', 'within: "1 hr"', "bad_duration",
     "target.dedup_horizon.within", 21),
    ("zero_within", 'within: "1 hour"', 'within: "0 hours"', "bad_duration",
     "target.dedup_horizon.within", 21),
    ("bad_processing_time", "available_now: true", 'processing_time: "10 secs"', "bad_duration",
     "trigger.processing_time", 26),
    ("missing_variable", "${KAFKA_BOOTSTRAP}", "${KAFKA_BROKERS}", "missing_variable",
     "source.kafka.bootstrap_servers", 4),
    ("bad_variable", "checkpoint: ${DATA_ROOT}/checkpoints/orders",
     "checkpoint: ${DATA_ROOT/checkpoints/orders", "bad_variable", "checkpoint", 22),
    ("order_by_without_upsert", "partition_by: []", "order_by: ts", "order_by_rules",
     "target.order_by", 18),
    ("upsert_without_order_by", "mode: insert_only", "mode: upsert", "order_by_rules",
     "target.mode", 17),
    ("json_without_schema", '  schema: "order_id STRING, customer STRING, amount DOUBLE, ts TIMESTAMP"',
     "  # no schema", "schema_rules", "source", 2),
    ("schema_with_string_format", "format: json", "format: string", "schema_rules",
     "source.schema", 9),
    ("horizon_not_timestamp", "column: ts", "column: amount", "bad_column",
     "target.dedup_horizon.column", 20),
    ("path_and_table", "partition_by: []", "table: main.sales.orders", "exclusive_keys",
     "target.table", 18),
    ("neither_path_nor_table", "  path: ${DATA_ROOT}/tables/orders", "  cluster_by: []",
     "missing_key", "target", 15),
    ("topics_and_pattern", "starting_offsets: earliest", 'pattern: "orders.*"', "exclusive_keys",
     "source.kafka.pattern", 6),
    ("partition_and_cluster", "partition_by: []", "partition_by: [ts]\n  cluster_by: [ts]",
     "exclusive_keys", "target.cluster_by", 19),
    ("reserved_option", "max_offsets_per_trigger: 1000",
     "options: {isolation.level: read_uncommitted}", "reserved_option",
     "source.kafka.options.isolation.level", 7),
    ("prefixed_option", "max_offsets_per_trigger: 1000",
     "options: {kafka.security.protocol: SSL}", "bad_value",
     "source.kafka.options.kafka.security.protocol", 7),
    ("python_tag", "name: orders", 'name: !!python/object/apply:os.system ["echo hi"]',
     "yaml_tag", "name", 1),
    ("missing_checkpoint", "checkpoint: ${DATA_ROOT}/checkpoints/orders\n", "", "missing_key",
     "checkpoint", 1),
    ("zero_max_offsets", "max_offsets_per_trigger: 1000", "max_offsets_per_trigger: 0",
     "bad_value", "source.kafka.max_offsets_per_trigger", 7),
    ("bad_table_name", "partition_by: []", "table: main.sales.orders-eu", "bad_value",
     "target.table", 18),
    ("now_and_interval", "available_now: true", 'available_now: true\n  processing_time: "1 minute"',
     "exclusive_keys", "trigger.processing_time", 27),
    ("nested_spark_conf", "spark_conf: {}", "spark_conf: {spark.sql: {shuffle: 4}}", "wrong_type",
     "spark_conf.spark.sql", 27),
    ("dead_letter_is_target", "path: ${DATA_ROOT}/dead_letter/orders",
     "path: ${DATA_ROOT}/tables/orders", "bad_value", "dead_letter", 23),
    ("bad_pattern", "topics: [orders]", 'pattern: "orders(["', "bad_value",
     "source.kafka.pattern", 5),
    ("uid_fields_twice", "header: message-id", "fields: [order_id, order_id]", "bad_value",
     "uid.fields[1]", 14),
    ("empty_select", 'select: ["*", "amount * 100 AS cents"]', "select: []", "bad_value",
     "transform.select", 11),
    ("empty_name", "name: orders", 'name: ""', "bad_value", "name", 1),
    ("unknown_template_variable", "  path: ${DATA_ROOT}/tables/orders",
     "  path: ${DATA_ROOT}/tables/${topics}", "unknown_template", "target.path", 16),
    ("template_outside_target", "checkpoint: ${DATA_ROOT}/checkpoints/orders",
     "checkpoint: ${DATA_ROOT}/checkpoints/${topic}", "unknown_template", "checkpoint", 22),
    ("per_topic_dead_letters_one_target", "path: ${DATA_ROOT}/dead_letter/orders",
     "path: ${DATA_ROOT}/dead_letter/${topic}", "template_rules", "dead_letter.path", 24),
    ("per_topic_schemas_one_target", "  format: json",
     '  format: json\n  schemas: {orders: "order_id STRING"}', "template_rules",
     "source.schemas", 9),
    ("uid_field_not_in_schema", NO_TRANSFORM + "uid:\n  header: message-id",
     NO_TRANSFORM_GONE + "uid:\n  field: order_idd", "bad_column", "uid.field", 14),
]


def test_base_spec_is_valid():
    pipeline = load_text(BASE, "orders.yaml", environ=TEST_ENVIRON, settings=TEST_SETTINGS).pipeline
    assert pipeline.name == "orders"


@pytest.mark.parametrize("old, new, code, path, line", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_broken_spec_is_reported_at_its_key_and_line(old, new, code, path, line):
    found = [(p.code, p.path, p.line) for p in problems_of(broken(old, new))]
    assert (code, path, line) in found


def test_there_are_at_least_thirty_broken_specs():
    assert len(CASES) >= 30


def test_problems_carry_the_file_and_are_sorted_by_line():
    text = broken("name: orders", "name: Orders").replace("mode: insert_only", "mode: upsrt")
    problems = problems_of(text)
    assert [p.line for p in problems] == sorted(p.line for p in problems)
    assert {p.file for p in problems} == {"orders.yaml"}


def test_bad_enum_message_has_the_contract_form():
    [problem] = problems_of(broken("mode: insert_only", "mode: upsrt"))
    assert problem.render() == ("orders.yaml:17: target.mode: 'upsrt' is not a mode; "
                                "expected insert_only or upsert (did you mean 'upsert'?)")


def test_unknown_key_lists_the_allowed_keys_and_suggests_one():
    [problem] = problems_of(broken("topics: [orders]", "topcs: [orders]"))
    assert "expected one of bootstrap_servers, topics, pattern" in problem.message
    assert problem.message.endswith("(did you mean 'topics'?)")


def test_misspelt_required_key_is_not_also_reported_missing():
    problems = problems_of(broken("header: message-id", "heder: message-id"))
    assert [p.code for p in problems] == ["unknown_key"]


def test_yaml_boolean_hint_names_the_word_and_the_quotes():
    [problem] = problems_of(broken("header: message-id", "header: off"))
    assert problem.message == ('YAML read the unquoted off as the boolean false; expected a '
                               'Kafka header name: write "off" in quotes')


def test_yaml_date_hint():
    [problem] = problems_of(broken("checkpoint: ${DATA_ROOT}/checkpoints/orders",
                                   "checkpoint: 2024-01-01"))
    assert "YAML read the unquoted 2024-01-01 as a date" in problem.message


def test_duplicate_key_names_the_first_line():
    problems = problems_of(broken("  mode: insert_only", "  mode: insert_only\n  mode: upsert"))
    assert problems[0].message.startswith("duplicate key (first at line 17)")


def test_within_suggests_the_unit():
    [problem] = problems_of(broken('within: "1 hour"', 'within: "2 hrs"'))
    assert problem.message.endswith("(did you mean '2 hours'?)")


def test_missing_variable_names_the_variable_and_the_places_looked_in():
    [problem] = problems_of(broken("${KAFKA_BOOTSTRAP}", "${KAFKA_BROKERS}"))
    assert problem.message.startswith("${KAFKA_BROKERS} is not set (looked in the environment, "
                                      "conf/test.yaml vars)")


def test_syntax_error_shows_numbered_context_with_a_caret():
    [problem] = problems_of(broken("  format: json", " format: json"))
    assert ">  8 |  format: json" in problem.context
    assert "   7 |     max_offsets_per_trigger: 1000" in problem.context


def test_every_mistake_of_one_file_is_reported_at_once():
    text = (broken("name: orders", "name: Orders")
            .replace("topics: [orders]", "topics: [no]")
            .replace("mode: insert_only", "mode: upsrt")
            .replace('within: "1 hour"', 'within: "1 hr"')
            .replace("${KAFKA_BOOTSTRAP}", "${KAFKA_BROKERS}"))
    found = [(p.code, p.line) for p in problems_of(text)]
    assert found == [("bad_name", 1), ("missing_variable", 4), ("yaml_boolean", 5),
                     ("bad_enum", 17), ("bad_duration", 21)]


def test_empty_file():
    [problem] = problems_of("# nothing yet\n")
    assert (problem.code, problem.path) == ("wrong_type", "")
    assert problem.message.startswith("the file is empty")


def test_secret_value_is_masked_in_an_error():
    environ = {**TEST_ENVIRON, "KAFKA_JAAS_CONFIG": "hunter2"}
    text = broken("max_offsets_per_trigger: 1000", "max_offsets_per_trigger: ${KAFKA_JAAS_CONFIG}")
    [problem] = problems_of(text, environ)
    assert "hunter2" not in problem.message
    assert "***" in problem.message
