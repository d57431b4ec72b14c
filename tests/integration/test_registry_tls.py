"""A registry over HTTPS with a bearer token, end to end: the test makes its own CA, the
stand-in serves with a certificate it signed, confluent-kafka's client (CA file, static
bearer token) registers the writer schema, and a pipeline file's `source.registry.tls.ca`
and `auth.bearer` read it. A wrong token stops `ingest run` with exit 1, the URL shown and
the token nowhere in the output."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Sender, run_once, table
from tests.integration.processes import IngestProcess, write_pipeline
from tests.schema_registry_stand_in import StandInRegistry
from tests.tls_certificates import make_certificates

TOKEN = "sr-bearer-token-5f1e2c"
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"}]}


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory):
    certificates = make_certificates(tmp_path_factory.mktemp("certs"))
    stand_in = StandInRegistry(token=TOKEN, tls=(str(certificates.server_cert),
                                                 str(certificates.server_key))).start()
    yield stand_in, certificates.ca
    stand_in.stop()


def produce(stand_in, ca, kafka, topic) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({
        "url": stand_in.url, "ssl.ca.location": str(ca),
        "bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": TOKEN,
        "bearer.auth.logical.cluster": "lsrc-tests", "bearer.auth.identity.pool.id": "pool-tests"})
    serializer = AvroSerializer(client, json.dumps(ORDER))
    sender = Sender(kafka, topic)
    for i in range(2):
        value = serializer({"order_id": f"o{i}", "amount": i + 0.5},
                           SerializationContext(topic, MessageField.VALUE))
        sender.send(value, uid=f"o{i}")
    sender.flush()


def pipeline_file(tmp_path, topic, url, ca):
    return write_pipeline(tmp_path, topic, name="orders_tls", source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic]},
        "format": "avro", "schema": None,
        "registry": {"url": url, "auth": {"bearer": "${SR_TOKEN}"}, "tls": {"ca": str(ca)}}})


def test_https_with_a_ca_file_and_a_bearer_token(spark, kafka, topic, tmp_path, tls_registry):
    from dataclasses import replace

    from ingest.batch.formats.registry import RegistryUnavailable
    from ingest.batch.formats.schemas import SchemaDecoder
    from ingest.spec.loader import load_file

    stand_in, ca = tls_registry
    produce(stand_in, ca, kafka, topic)
    pipeline = load_file(pipeline_file(tmp_path, topic, stand_in.url, ca),
                         environ={"KAFKA_BOOTSTRAP": kafka.bootstrap, "SR_TOKEN": TOKEN}).pipeline
    assert pipeline.source.registry.tls.ca == str(ca) and pipeline.source.registry.bearer == TOKEN
    without_ca = replace(pipeline.source, registry=replace(pipeline.source.registry, tls=None))
    with pytest.raises(RegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        SchemaDecoder.open(without_ca)  # the system's CAs do not know the test's

    run_once(spark, pipeline, timeout=600)
    rows = sorted((r._uid, r.amount) for r in table(spark, pipeline.target.path).collect())
    assert rows == [("o0", 0.5), ("o1", 1.5)]


def test_a_wrong_token_stops_the_run_with_exit_1_and_the_token_unprinted(
        kafka, topic, tmp_path, tls_registry):
    stand_in, ca = tls_registry
    stand_in.register(f"{topic}-value", {"schema": json.dumps(ORDER)})
    wrong = "wrong-token-7c1d9a"
    run = IngestProcess(pipeline_file(tmp_path, topic, stand_in.url, ca), kafka.bootstrap,
                        tmp_path / "run.log", extra_env={"SR_TOKEN": wrong})
    assert run.wait(timeout=300) == 1, run.output()[-3000:]
    errors = [line for line in run.output().splitlines() if line.startswith("error: ")]
    assert errors and f"schema registry {stand_in.url} answered HTTP 401" in errors[0]
    assert "source.registry.auth" in errors[0]
    assert wrong not in run.output() and TOKEN not in run.output()
