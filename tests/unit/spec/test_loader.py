"""Loading valid specs: defaults, variables, secrets, and the examples' round trip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import check_unique, load_file, load_text
from ingest.spec.model import DeadLetter, Trigger
from ingest.spec.settings import Settings, load_settings

ENVIRON = {"KAFKA_BOOTSTRAP": "b:9092", "DATA_ROOT": "/data"}
SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True,
                    vars={"DATA_ROOT": "/conf-root", "TOPIC": "orders"},
                    secret_names=frozenset({"KAFKA_JAAS_CONFIG"}))
EXAMPLES = sorted(Path("pipelines").glob("*.yaml"))

MINIMAL = """\
name: orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [orders]
  schema: "order_id STRING, ts TIMESTAMP"
uid:
  field: order_id
target:
  path: ${DATA_ROOT}/tables/orders
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""


def load(text: str, environ=None):
    return load_text(text, "p.yaml", environ=ENVIRON if environ is None else environ,
                     settings=SETTINGS).pipeline


def test_contract_defaults():
    pipeline = load(MINIMAL)
    kafka = pipeline.source.kafka
    assert (pipeline.source.format, kafka.isolation_level, kafka.allow_data_loss) == \
        ("json", "read_committed", False)
    assert (kafka.starting_offsets, kafka.max_offsets_per_trigger, dict(kafka.options)) == \
        ("earliest", 100_000, {})
    assert (pipeline.target.mode, pipeline.transform, dict(pipeline.spark_conf)) == \
        ("insert_only", None, {})
    assert pipeline.trigger == Trigger(available_now=True)
    assert pipeline.dead_letter == DeadLetter(path="/data/tables/orders_dead_letter")


def test_dead_letter_default_for_a_table_target():
    text = MINIMAL.replace("path: ${DATA_ROOT}/tables/orders", "table: main.sales.orders")
    assert load(text).dead_letter == DeadLetter(table="main.sales.orders_dead_letter")


def test_processing_time_turns_available_now_off():
    pipeline = load(MINIMAL + 'trigger:\n  processing_time: "10 seconds"\n')
    assert pipeline.trigger == Trigger(available_now=False, processing_time="10 seconds")


def test_within_seconds():
    horizon = "\n  dedup_horizon: {column: ts, within: 2 days}"
    text = MINIMAL.replace("  path: ${DATA_ROOT}/tables/orders",
                           "  path: ${DATA_ROOT}/tables/orders" + horizon)
    assert load(text).target.dedup_horizon.within_seconds == 2 * 86400


def test_per_partition_starting_offsets():
    text = MINIMAL.replace("topics: [orders]",
                           "topics: [orders]\n    starting_offsets: {orders: {0: 42, 1: -2}}")
    offsets = load(text).source.kafka.starting_offsets
    assert {topic: dict(parts) for topic, parts in offsets.items()} == {"orders": {0: 42, 1: -2}}


def test_variables_from_environment_then_conf_then_default():
    text = MINIMAL.replace("topics: [orders]", "topics: [\"${TOPIC}\", \"${OTHER:-audit}\"]")
    pipeline = load(text, environ={"KAFKA_BOOTSTRAP": "b:9092"})
    assert pipeline.target.path == "/conf-root/tables/orders"  # from conf vars
    assert pipeline.source.kafka.topics == ("orders", "audit")  # conf, then default


def test_empty_variable_takes_the_default_like_a_shell():
    text = MINIMAL.replace("${KAFKA_BOOTSTRAP}", "${KAFKA_BOOTSTRAP:-fallback:9092}")
    pipeline = load(text, environ={"KAFKA_BOOTSTRAP": "", "DATA_ROOT": "/d"})
    assert pipeline.source.kafka.bootstrap_servers == "fallback:9092"


def test_dollar_dollar_brace_is_a_literal():
    text = MINIMAL.replace("topics: [orders]", 'pattern: "orders$${x}"')
    assert load(text).source.kafka.pattern == "orders${x}"


def test_a_whole_variable_may_fill_a_number_or_a_boolean():
    text = MINIMAL.replace("topics: [orders]", "topics: [orders]\n"
                           "    max_offsets_per_trigger: ${MAX}\n    allow_data_loss: ${LOSSY}")
    kafka = load(text, environ={**ENVIRON, "MAX": "500", "LOSSY": "true"}).source.kafka
    assert (kafka.max_offsets_per_trigger, kafka.allow_data_loss) == (500, True)


def test_secret_values_are_collected_from_secret_variables_and_secret_keys():
    text = MINIMAL.replace("topics: [orders]", "topics: [orders]\n    options:\n"
                           "      sasl.jaas.config: ${KAFKA_JAAS_CONFIG}\n"
                           "      ssl.truststore.password: changeit")
    pipeline = load(text, environ={**ENVIRON, "KAFKA_JAAS_CONFIG": "jaas-secret"})
    assert pipeline.secret_values == {"jaas-secret", "changeit"}


def test_coordinates_uid_loads_with_a_warning():
    loaded = load_text(MINIMAL.replace("field: order_id", "coordinates: true"), "p.yaml",
                       environ=ENVIRON, settings=SETTINGS)
    [warning] = loaded.warnings
    assert (warning.code, warning.path, warning.line, warning.warning) == \
        ("coordinates_uid", "uid.coordinates", 8, True)


def test_place_puts_later_problems_on_lines():
    from ingest.errors import Problem

    loaded = load_text(MINIMAL, "p.yaml", environ=ENVIRON, settings=SETTINGS)
    [placed] = loaded.place([Problem("bad_ddl", "source.schema", "bad")])
    assert (placed.file, placed.line) == ("p.yaml", 6)


def test_same_name_in_two_files_is_a_problem():
    one = load_text(MINIMAL, "a.yaml", environ=ENVIRON, settings=SETTINGS)
    two = load_text(MINIMAL.replace("checkpoints/orders", "checkpoints/other")
                    .replace("tables/orders", "tables/other"), "b.yaml", environ=ENVIRON, settings=SETTINGS)
    [problem] = check_unique([one, two])
    assert (problem.code, problem.path, problem.file, problem.line) == \
        ("duplicate_name", "name", "b.yaml", 1)


@pytest.mark.parametrize("checkpoint", ["checkpoints/orders/", "./checkpoints//orders", "checkpoints/x/../orders"])
def test_one_checkpoint_spelled_two_ways_is_a_problem(checkpoint, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    one = load_text(MINIMAL.replace("${DATA_ROOT}/checkpoints/orders", "checkpoints/orders"), "a.yaml",
                    environ=ENVIRON, settings=SETTINGS)
    two = load_text(MINIMAL.replace("name: orders", "name: copy")
                    .replace("${DATA_ROOT}/checkpoints/orders", checkpoint)
                    .replace("tables/orders", "tables/copy"), "b.yaml", environ=ENVIRON, settings=SETTINGS)
    [problem] = check_unique([one, two])
    assert (problem.code, problem.path, problem.file) == ("duplicate_name", "checkpoint", "b.yaml")


@pytest.mark.parametrize("target", ["${DATA_ROOT}/tables/orders/", "${DATA_ROOT}//tables/orders"])
def test_one_target_for_two_pipelines_is_a_problem(target):
    one = load_text(MINIMAL, "a.yaml", environ=ENVIRON, settings=SETTINGS)
    two = load_text(MINIMAL.replace("name: orders", "name: copy").replace("checkpoints/orders", "checkpoints/c")
                    .replace("${DATA_ROOT}/tables/orders", target), "b.yaml", environ=ENVIRON, settings=SETTINGS)
    [problem] = check_unique([one, two])
    assert (problem.code, problem.path, problem.file) == ("duplicate_name", "target.path", "b.yaml")
    assert "expected a target of its own" in problem.message


def test_unreadable_file(tmp_path):
    with pytest.raises(SpecErrors) as raised:
        load_file(tmp_path / "nope.yaml", settings=SETTINGS)
    assert raised.value.problems[0].code == "unreadable_file"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_round_trips(path):
    settings = load_settings("local", "conf")
    pipeline = load_file(path, environ={}, settings=settings).pipeline
    again = load_text(to_yaml(to_document(pipeline)), str(path), environ={}, settings=settings).pipeline
    assert again == pipeline


def test_the_three_examples_exist():
    assert {"clickstream", "customers", "orders"} <= {p.stem for p in EXAMPLES}


def test_round_trip_keeps_a_literal_dollar_brace():
    pipeline = load(MINIMAL.replace("topics: [orders]", 'pattern: "a$${b}"'))
    assert load(to_yaml(to_document(pipeline))) == replace(pipeline, source_file="p.yaml")


def test_upsert_with_a_dedup_horizon_is_refused():
    text = MINIMAL.replace("  path: ${DATA_ROOT}/tables/orders",
                           "  path: ${DATA_ROOT}/tables/orders\n  mode: upsert\n  order_by: ts\n"
                           "  dedup_horizon: {column: ts, within: 1 hour}")
    with pytest.raises(SpecErrors) as raised:
        load_text(text, "p.yaml", environ=ENVIRON, settings=SETTINGS)
    [problem] = raised.value.problems
    assert (problem.code, problem.path) == ("exclusive_keys", "target.dedup_horizon")
    assert "second row" in problem.message


def test_max_share_alone_keeps_the_default_dead_letter_location():
    text = """\
name: shares
source:
  kafka: {bootstrap_servers: "localhost:9092", topics: [t]}
  schema: "a STRING"
uid: {header: message-id}
target: {path: /data/t}
checkpoint: /data/c
dead_letter: {max_share: 0.25}
"""
    from ingest.spec.loader import load_text

    dead = load_text(text, environ={}).pipeline.dead_letter
    assert (dead.path, dead.max_share) == ("/data/t_dead_letter", 0.25)
