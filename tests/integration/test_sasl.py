"""Authenticated Kafka (SASL/PLAIN over SASL_PLAINTEXT) on a broker of its own: credentials
from the environment, a run, status and verify work; wrong credentials fail fast and
clearly; the password appears in no output and no file the pipeline writes."""

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from ingest.cli import main
from ingest.kafka import admin as kafka_admin
from ingest.kafka.local_broker import LocalKafka, SaslUser, create_topic
from ingest.spec.model import KafkaSource
from tests.integration.processes import IngestProcess

# Quote and backslash: the JAAS text must escape them, and nothing may print them.
PASSWORD = f'pw"\\{uuid.uuid4().hex}'
SASL_OPTIONS = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "${KAFKA_JAAS_CONFIG}"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    kafka = LocalKafka(work_dir=tmp_path_factory.mktemp("sasl-kafka"),
                       sasl_users=(SaslUser("ingest", PASSWORD),))
    kafka.start()
    yield kafka
    kafka.close()


@pytest.fixture(scope="module")
def sasl_topic(broker):
    name = f"sasl-{uuid.uuid4().hex[:8]}"
    create_topic(broker.client_config(), name, partitions=2)
    producer = Producer({**broker.client_config(), "enable.idempotence": True, "acks": "all"})
    for i in range(6):
        producer.produce(name, value=json.dumps({"order_id": f"o{i}"}).encode(), partition=i % 2,
                         headers=[("message-id", f"u-{i}".encode())])
    assert producer.flush(30) == 0
    return name


def write_pipeline(folder: Path, topic: str) -> Path:
    document = {
        "name": "secure",
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                             "options": SASL_OPTIONS},
                   "format": "json", "schema": "order_id STRING NOT NULL"},
        "uid": {"header": "message-id"},
        "target": {"path": str(folder / "tables" / "secure")},
        "checkpoint": str(folder / "checkpoints" / "secure"),
        "dead_letter": {"path": str(folder / "dead_letter" / "secure")},
    }
    path = folder / "secure.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def files_holding(folder: Path, secret: bytes) -> list[str]:
    return [str(f) for f in folder.rglob("*") if f.is_file() and secret in f.read_bytes()]


def test_a_run_with_credentials_from_the_environment_never_shows_the_password(
        spark, broker, sasl_topic, tmp_path, monkeypatch, capsys):
    file = write_pipeline(tmp_path, sasl_topic)
    jaas = broker.jaas_config()
    run = IngestProcess(file, broker.bootstrap, tmp_path / "run.log",
                        extra_env={"KAFKA_JAAS_CONFIG": jaas})
    assert run.wait(timeout=400) == 0, run.output()[-3000:]
    rows = spark.read.format("delta").load(str(tmp_path / "tables" / "secure"))
    assert sorted(r._uid for r in rows.select("_uid").collect()) == [f"u-{i}" for i in range(6)]

    monkeypatch.setenv("KAFKA_BOOTSTRAP", broker.bootstrap)
    monkeypatch.setenv("KAFKA_JAAS_CONFIG", jaas)
    assert main(["plan", str(file)]) == 0
    assert main(["status", str(file)]) == 0
    assert main(["status", str(file), "--json"]) == 0
    assert main(["verify", str(file)]) == 0
    printed = capsys.readouterr()
    assert "verify secure: OK" in printed.out and "sasl.jaas.config" in printed.out

    secret = PASSWORD.encode()
    assert secret not in (printed.out + printed.err).encode()
    assert secret not in run.output().encode()
    assert files_holding(tmp_path, secret) == [], "the password was written to disk"
    assert jaas.encode() not in Path(run.log).read_bytes()


def test_wrong_credentials_fail_fast_with_a_clear_error(broker, sasl_topic, tmp_path, monkeypatch, capsys):
    wrong = broker.jaas_config(SaslUser("ingest", "not-the-password"))
    kafka = KafkaSource(bootstrap_servers=broker.bootstrap, topics=(sasl_topic,),
                        options={**SASL_OPTIONS, "sasl.jaas.config": wrong})
    started = time.monotonic()
    with pytest.raises(kafka_admin.BrokerUnreachable, match="Authentication failed"):
        kafka_admin.check_reachable(kafka, timeout=30)
    assert time.monotonic() - started < 10

    file = write_pipeline(tmp_path, sasl_topic)
    started = time.monotonic()
    run = IngestProcess(file, broker.bootstrap, tmp_path / "run.log",
                        extra_env={"KAFKA_JAAS_CONFIG": wrong})
    assert run.wait(timeout=120) == 1
    assert time.monotonic() - started < 60, "a refused login must not wait out retries"
    output = run.output()
    assert "refused the connection" in output and "Authentication failed" in output, output[-3000:]
    assert "not-the-password" not in output

    monkeypatch.setenv("KAFKA_BOOTSTRAP", broker.bootstrap)
    monkeypatch.setenv("KAFKA_JAAS_CONFIG", wrong)
    assert main(["verify", str(file)]) == 1
    printed = capsys.readouterr()
    assert "Authentication failed" in printed.err and "not-the-password" not in printed.out + printed.err
