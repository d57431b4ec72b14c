"""Fixtures for runs against the real broker, Spark and Delta."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

PROJECT = Path(__file__).resolve().parents[2]


class Sender:
    """Writes records to a topic with an idempotent producer; each record is
    (payload dict or raw bytes, uid or None, partition)."""

    def __init__(self, kafka, topic):
        self.kafka, self.topic = kafka, topic
        self.producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})

    def send(self, payload, uid: str | None = None, partition: int = 0, headers=None) -> None:
        value = payload if isinstance(payload, (bytes, type(None))) else json.dumps(payload).encode()
        all_headers = list(headers or []) + ([("message-id", uid.encode())] if uid else [])
        self.producer.produce(self.topic, value=value, partition=partition, headers=all_headers)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0, "records not delivered"

    def transaction(self, payloads: list, commit: bool, partition: int = 0) -> None:
        txn = Producer({**self.kafka.client_config(), "transactional.id": f"t-{uuid.uuid4().hex}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for payload, uid in payloads:
            txn.produce(self.topic, value=json.dumps(payload).encode(), partition=partition,
                        headers=[("message-id", uid.encode())])
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)


class DebeziumChanges:
    """Debezium change events for a `customers` table, keyed as Debezium keys them."""

    def __init__(self, kafka, topic):
        self.topic = topic
        self.producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})

    def send(self, op: str, key: int, lsn: int | None, row: dict | None = None, *,
             wrapped: bool = False, partition: int = 0, ts_ms: int = 1_700_000_000_000) -> None:
        image = {"id": key, **(row or {})}
        envelope = {"before": image if op == "d" else None, "after": None if op == "d" else image,
                    "op": op, "ts_ms": ts_ms,
                    "source": {"connector": "postgresql", "db": "shop", "table": "customers",
                               **({"lsn": lsn} if lsn is not None else {})}}
        value = {"schema": {"type": "struct", "name": "shop.customers.Envelope"},
                 "payload": envelope} if wrapped else envelope
        self.raw(json.dumps(value).encode(), key, partition)

    def raw(self, value: bytes | None, key: int, partition: int = 0) -> None:
        self.producer.produce(self.topic, key=json.dumps({"id": key}).encode(), value=value,
                              partition=partition)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


@pytest.fixture
def sender(kafka, topic):
    return Sender(kafka, topic)


@pytest.fixture
def pipeline(kafka, topic, tmp_path):
    """An orders pipeline over the test's topic; tests `replace` what they vary."""
    return Pipeline(
        name="orders",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=(topic,)),
                      format="json",
                      schema="order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"),
        uid=Uid(header="message-id"),
        target=Target(path=str(tmp_path / "tables" / "orders")),
        checkpoint=str(tmp_path / "checkpoints" / "orders"),
        dead_letter=DeadLetter(path=str(tmp_path / "dead_letter" / "orders")),
    )


def run_once(spark, pipeline, timeout: float = 240, **kwargs):
    """Process what is in the topic; returns the batch reports."""
    from ingest.stream.query import start_query

    reports = []
    query, processor = start_query(spark, pipeline, once=True, on_report=reports.append, **kwargs)
    try:
        finished = query.awaitTermination(timeout)
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        assert finished, f"query still running after {timeout}s"
    finally:
        query.stop()
        processor.settle()  # as `ingest run` does once a query ends
    return reports


def run_recovering(spark, pipeline, timeout: float = 240):
    """What `ingest run --once` does before its query: the start plan from the
    checkpoint or the target's ledger, then the query from there."""
    from ingest.stream import recovery

    plan = recovery.plan_start(spark, pipeline, recovery.fetch_watermarks(pipeline))
    return plan, run_once(spark, pipeline, timeout=timeout, starting_offsets=plan.starting_offsets)


def crash_at(spark, pipeline, point: str) -> None:
    """A run (started as `ingest run` starts it) whose first batch fails at `point`, as a
    SIGKILL there would stop it: the point raises in this process (ingest/batch/commit/faults.py
    says why the durable state is the kill's). Needs INGEST_FAULT_CONFIRM=crash."""
    from ingest.batch.commit import faults
    from ingest.stream import recovery
    from ingest.stream.query import start_query

    plan = recovery.plan_start(spark, pipeline, recovery.fetch_watermarks(pipeline))
    query, processor = start_query(spark, pipeline, once=True, starting_offsets=plan.starting_offsets)
    try:
        with faults.raising(point):
            try:
                query.awaitTermination(600)
            except Exception as error:  # Spark's StreamingQueryException around the Python raise
                assert "InjectedFault" in str(error), f"{point}: the run failed otherwise: {error}"
                return
    finally:
        query.stop()
        processor.settle()
    raise AssertionError(f"{point}: the run finished without reaching the fault point")


def ingest_run(pipeline_file, capsys) -> tuple[int, str]:
    """`ingest run FILE --once` as cli.main runs it, on this process's session (the test sets
    the file's variables, KAFKA_BOOTSTRAP, in the environment): its exit code and what it printed."""
    from ingest.cli import main

    code = main(["run", str(pipeline_file), "--once"])
    said = capsys.readouterr()
    return code, said.out + said.err


def table(spark, path):
    return spark.read.format("delta").load(path)


def with_target(pipeline, **changes):
    return replace(pipeline, target=replace(pipeline.target, **changes))


@dataclass(frozen=True)
class DemoRun:
    root: Path
    exit_code: int
    output: str

    def figure(self, name: str) -> int | None:
        """A count from the demo's closing table, e.g. figure("rows in the target")."""
        for line in self.output.splitlines():
            match = re.fullmatch(rf"\s*{re.escape(name)}\s+(\d+)\b.*", line)
            if match:
                return int(match.group(1))
        return None


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """One `ingest demo` (a child process, its own broker) for the demo and notebook tests."""
    root = tmp_path_factory.mktemp("demo")
    (root / "tables" / "yours").mkdir(parents=True)  # a table of your own under the same DATA_ROOT
    (root / "tables" / "yours" / "part-0").write_text("your table")
    env = {k: v for k, v in os.environ.items() if k not in ("INGEST_FAULT", "DATA_ROOT")}
    done = subprocess.run([sys.executable, "-m", "ingest", "demo", "--data-root", str(root)],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=1500)
    return DemoRun(root, done.returncode, done.stdout + done.stderr)


REGISTRY_USER, REGISTRY_PASSWORD = "ingest-tests", "sr-secret-pw"


@pytest.fixture(scope="session")
def registry():
    """The test stand-in for a Schema Registry (tests/schema_registry_stand_in.py), basic auth on."""
    from tests.schema_registry_stand_in import StandInRegistry

    stand_in = StandInRegistry(REGISTRY_USER, REGISTRY_PASSWORD).start()
    yield stand_in
    stand_in.stop()


def registry_spec(stand_in, **changes):
    """source.registry for the stand-in, with its credentials."""
    from ingest.spec.model import Registry

    return Registry(url=stand_in.url, basic=f"{REGISTRY_USER}:{REGISTRY_PASSWORD}", **changes)


def registry_client(stand_in):
    """confluent-kafka's own client, as producers use it."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": stand_in.url,
                                 "basic.auth.user.info": f"{REGISTRY_USER}:{REGISTRY_PASSWORD}"})
