"""source.format avro/protobuf, source.registry and schema_evolution: loaded, or
reported with code, key path and line."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from ingest.spec.settings import Settings

ENVIRON = {"KAFKA_BOOTSTRAP": "localhost:9092", "DATA_ROOT": "/data",
           "SCHEMA_REGISTRY_URL": "https://sr.example:8081", "SR_USER": "svc",
           "SR_PASSWORD": "pw-42-secret"}
SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True)

BASE = """\
name: orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [orders]
  format: avro
  registry:
    url: ${SCHEMA_REGISTRY_URL}
    subject: orders-value
    version: latest
    auth: {basic: "${SR_USER}:${SR_PASSWORD}"}
    tls: {ca: /etc/ssl/sr-ca.pem}
uid:
  header: message-id
target:
  path: ${DATA_ROOT}/tables/orders
checkpoint: ${DATA_ROOT}/checkpoints/orders
schema_evolution: add_columns
"""


def load(text: str):
    return load_text(text, "orders.yaml", environ=ENVIRON, settings=SETTINGS).pipeline


def problems_of(text: str):
    with pytest.raises(SpecErrors) as raised:
        load(text)
    return [(p.code, p.path, p.line) for p in raised.value.problems]


def broken(old: str, new: str) -> str:
    assert BASE.count(old) == 1, old
    return BASE.replace(old, new)


def test_the_registry_block_loads():
    pipeline = load(BASE)
    registry = pipeline.source.registry
    assert (pipeline.source.format, registry.url, registry.subject, registry.version) == \
        ("avro", "https://sr.example:8081", "orders-value", "latest")
    assert registry.basic == "svc:pw-42-secret" and registry.tls.ca == "/etc/ssl/sr-ca.pem"
    assert pipeline.schema_evolution == "add_columns"


def test_subject_defaults_to_the_topic_value_subject_and_version_may_be_a_number():
    pipeline = load(broken("    subject: orders-value\n    version: latest\n", "    version: 3\n"))
    assert (pipeline.source.subject, pipeline.source.registry.version) == ("orders-value", 3)


def test_credentials_are_secrets_even_in_the_documented_form():
    loaded = load_text(BASE, "orders.yaml", environ=ENVIRON, settings=SETTINGS)
    assert {"svc:pw-42-secret", "pw-42-secret"} <= loaded.pipeline.secret_values


def test_a_password_in_the_url_is_a_secret():
    text = broken("url: ${SCHEMA_REGISTRY_URL}", "url: https://svc:pw-in-url@sr.example:8081")
    assert "pw-in-url" in load(text).secret_values


def test_the_registry_block_round_trips_through_the_document():
    pipeline = load(BASE)
    assert load(to_yaml(to_document(pipeline))) == pipeline


CASES = [
    ("avro_without_registry_or_file", "  registry:\n", "  registri:\n", "unknown_key",
     "source.registri", 7),
    ("neither_registry_nor_file", "  format: avro\n", "  format: avro\n  registry: null\n",
     "schema_rules", "source", 2),
    ("registry_and_file", "  format: avro\n", "  format: avro\n  schema_file: order.avsc\n",
     "schema_rules", "source", 2),
    ("schema_with_avro", "  format: avro\n", '  format: avro\n  schema: "id STRING"\n',
     "schema_rules", "source.schema", 7),
    ("registry_with_json", "  format: avro\n", '  format: json\n  schema: "id STRING"\n',
     "schema_rules", "source.registry", 8),
    ("bad_format", "  format: avro\n", "  format: avr\n", "bad_enum", "source.format", 6),
    ("unknown_registry_key", "    subject: orders-value\n", "    subjct: orders-value\n",
     "unknown_key", "source.registry.subjct", 9),
    ("missing_url", "    url: ${SCHEMA_REGISTRY_URL}\n", "", "missing_key", "source.registry.url", 7),
    ("not_a_url", "url: ${SCHEMA_REGISTRY_URL}", "url: sr.example:8081", "bad_value",
     "source.registry.url", 8),
    ("bad_version", "version: latest", "version: newest", "bad_value", "source.registry.version", 10),
    ("zero_version", "version: latest", "version: 0", "bad_value", "source.registry.version", 10),
    ("basic_without_colon", 'auth: {basic: "${SR_USER}:${SR_PASSWORD}"}', "auth: {basic: svc}",
     "bad_value", "source.registry.auth.basic", 11),
    ("basic_and_bearer", 'auth: {basic: "${SR_USER}:${SR_PASSWORD}"}',
     'auth: {basic: "a:b", bearer: tok}', "exclusive_keys", "source.registry.auth", 11),
    ("unknown_auth", 'auth: {basic: "${SR_USER}:${SR_PASSWORD}"}', "auth: {oauth: tok}",
     "unknown_key", "source.registry.auth.oauth", 11),
    ("cert_without_key", "tls: {ca: /etc/ssl/sr-ca.pem}", "tls: {cert: /etc/ssl/me.pem}",
     "bad_value", "source.registry.tls", 12),
    ("message_with_avro", "  format: avro\n", "  format: avro\n  message: shop.Order\n",
     "schema_rules", "source.message", 7),
    ("wrong_schema_file_suffix", "  registry:\n    url: ${SCHEMA_REGISTRY_URL}\n    subject: orders-value\n"
     "    version: latest\n    auth: {basic: \"${SR_USER}:${SR_PASSWORD}\"}\n"
     "    tls: {ca: /etc/ssl/sr-ca.pem}\n", "  schema_file: order.json\n", "bad_value",
     "source.schema_file", 7),
    ("proto_file_without_message", "  format: avro\n  registry:\n    url: ${SCHEMA_REGISTRY_URL}\n"
     "    subject: orders-value\n    version: latest\n    auth: {basic: \"${SR_USER}:${SR_PASSWORD}\"}\n"
     "    tls: {ca: /etc/ssl/sr-ca.pem}\n", "  format: protobuf\n  schema_file: order.proto\n",
     "schema_rules", "source", 2),
    ("bad_schema_evolution", "schema_evolution: add_columns", "schema_evolution: add",
     "bad_enum", "schema_evolution", 18),
]


@pytest.mark.parametrize("old, new, code, path, line", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_broken_registry_spec_is_reported_at_its_key_and_line(old, new, code, path, line):
    assert (code, path, line) in problems_of(broken(old, new))


def test_no_problem_message_shows_the_password():
    with pytest.raises(SpecErrors) as raised:
        load(broken("version: latest", "version: newest").replace(
            "https://sr.example", "https://svc:pw-in-url@sr.example"))
    assert "pw-in-url" not in str(raised.value) and "pw-42-secret" not in str(raised.value)


def test_schema_evolution_fail_loads():
    assert load(broken("schema_evolution: add_columns", "schema_evolution: fail")).schema_evolution == "fail"


def per_topic(subject: str = "", target: str = "${topic}") -> str:
    text = broken("    topics: [orders]\n", "    pattern: shop\\..*\n")
    text = text.replace("    subject: orders-value\n", subject)
    return text.replace("path: ${DATA_ROOT}/tables/orders", f"path: ${{DATA_ROOT}}/tables/{target}")


def test_a_table_per_topic_reads_each_topics_own_subject():
    from ingest.spec.template import for_topic, subject_per_topic

    pipeline = load(per_topic())
    assert subject_per_topic(pipeline) and pipeline.source.subject is None
    assert for_topic(pipeline, "shop.orders").source.subject == "shop.orders-value"
    assert for_topic(pipeline, "shop.refunds").source.registry.basic == "svc:pw-42-secret"
    shared = load(per_topic("    subject: shop-value\n"))  # a subject given: one for every topic
    assert not subject_per_topic(shared)
    assert for_topic(shared, "shop.orders").source.subject == "shop-value"


def test_a_pattern_into_one_table_needs_a_subject():
    assert ("template_rules", "source.registry", 7) in problems_of(per_topic(target="shop"))
