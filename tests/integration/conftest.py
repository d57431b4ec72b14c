"""Fixtures for runs against the real broker, Spark and Delta."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from contextlib import contextmanager
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


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """The S3 stand-in (tests/s3_server.py), started once per test session like the broker."""
    from tests import timing
    from tests.s3_server import LocalS3

    server = LocalS3(log=tmp_path_factory.mktemp("s3") / "moto_server.log")
    with timing.paid("s3_start"):
        server.start()
    yield server
    server.close()


S3_BUCKET = "ingest-tests"


@pytest.fixture(scope="session")
def s3_bucket(s3, spark) -> str:
    """A bucket on the stand-in, the shared session's S3A pointed at it for that bucket alone."""
    s3.create_bucket(S3_BUCKET)
    s3.use_in(spark, S3_BUCKET)
    return S3_BUCKET


@pytest.fixture
def s3_root(s3_bucket, request) -> str:
    """`s3a://BUCKET/<test>-<uuid>`: a test's own folder on the stand-in (no trailing slash)."""
    name = re.sub(r"[^a-zA-Z0-9-]", "-", request.node.name[:40])
    return f"s3a://{s3_bucket}/{name}-{uuid.uuid4().hex[:8]}"


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


def crash_at(spark, pipeline, point: str, batch: int | None = None) -> None:
    """A run (started as `ingest run` starts it) that fails at `point` in batch `batch` (or its
    first batch), as a SIGKILL there would stop it: the point raises in this process
    (ingest/batch/commit/faults.py says why the durable state is the kill's). Needs
    INGEST_FAULT_CONFIRM=crash."""
    from ingest.batch.commit import faults
    from ingest.stream import recovery
    from ingest.stream.query import start_query

    plan = recovery.plan_start(spark, pipeline, recovery.fetch_watermarks(pipeline))
    query, processor = start_query(spark, pipeline, once=True, starting_offsets=plan.starting_offsets)
    try:
        with faults.raising(point, batch):
            try:
                query.awaitTermination(600)
            except Exception as error:  # Spark's StreamingQueryException around the Python raise
                assert "InjectedFault" in str(error), f"{point}: the run failed otherwise: {error}"
                return
    finally:
        query.stop()
        processor.settle()
    raise AssertionError(f"{point}: the run finished without reaching the fault point")


@contextmanager
def queries_stopped_after(spark, timeout: float):
    """A watchdog for a run in this process: should it still go after `timeout`, its queries are
    stopped, so the test fails rather than the suite hangs. Yields a list that gets True then."""
    timed_out: list[bool] = []

    def stop_the_run() -> None:
        timed_out.append(True)
        for query in spark.streams.active:
            query.stop()

    watchdog = threading.Timer(timeout, stop_the_run)
    watchdog.start()
    try:
        yield timed_out
    finally:
        watchdog.cancel()


def ingest_run(pipeline_file, capsys, timeout: float = 900, options: tuple[str, ...] = ()) -> tuple[int, str]:
    """`ingest run FILE --once [options]` as cli.main runs it, on this process's session (the test
    sets the file's variables, KAFKA_BOOTSTRAP, in the environment): its exit code and what it printed."""
    from pyspark.sql import SparkSession

    from ingest.cli import main

    spark = SparkSession.getActiveSession()
    assert spark is not None, "ingest_run runs on the shared session: the test needs the spark fixture"
    with queries_stopped_after(spark, timeout) as timed_out:
        code = main(["run", str(pipeline_file), "--once", *options])
    said = capsys.readouterr()
    assert not timed_out, f"ingest run still running after {timeout:.0f}s:\n{(said.out + said.err)[-3000:]}"
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


WHEEL_PIPELINE = """\
name: clicks
source:
  kafka: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", topics: [clicks]}
  format: json
  schema: "page STRING, ts TIMESTAMP"
uid: {header: message-id}
target: {path: "${DATA_ROOT}/tables/clicks"}
checkpoint: ${DATA_ROOT}/checkpoints/clicks
"""


def sh(*command, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@dataclass(frozen=True)
class InstalledWheel:
    """The package as a user gets it, and what its commands answered before the spark
    extra was installed (test_wheel.py checks them)."""

    venv: Path
    user: Path  # the user's folder: no checkout, no conf/
    env: dict[str, str]
    version: subprocess.CompletedProcess
    validate: subprocess.CompletedProcess
    status_without_spark: subprocess.CompletedProcess
    validate_strict: subprocess.CompletedProcess

    @property
    def ingest(self) -> Path:
        return self.venv / "bin" / "ingest"


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory) -> InstalledWheel:
    """The wheel built, installed into a fresh venv (pip installs from its cache with the
    versions pinned in requirements.lock), its commands run before and after the spark extra."""
    root = tmp_path_factory.mktemp("wheel")
    dist, venv, user = root / "dist", root / "venv", root / "user"
    user.mkdir()
    # Nothing of the checkout may leak in: with PYTHONPATH pointing at it, pip would
    # take `ingest` as installed already.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "INGEST_FAULT", "INGEST_CONF_DIR", "DATA_ROOT")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    lock = PROJECT / "requirements.lock"
    ok(sh(sys.executable, "-m", "pip", "wheel", PROJECT, "--no-deps", "-w", dist, "-q", cwd=root, env=env))
    [wheel] = dist.glob("ingest-*.whl")
    ok(sh("python3.11", "-m", "venv", venv, cwd=root, env=env))
    pip, ingest = venv / "bin" / "pip", venv / "bin" / "ingest"
    # No byte-compiling of every installed module (pyspark's thousands): what the runs import is
    # compiled as they import it. Both installs took 44 s with it, 22 s without (load 11).
    install = (pip, "install", "-q", "--no-compile", "-c", lock)
    ok(sh(*install, wheel, cwd=root, env=env))
    (user / "pipelines").mkdir()
    (user / "pipelines" / "clicks.yml").write_text(WHEEL_PIPELINE)
    with_vars = {**env, "KAFKA_BOOTSTRAP": "localhost:9092", "DATA_ROOT": str(user / "data")}
    installed = InstalledWheel(
        venv, user, env, version=sh(ingest, "--version", cwd=user, env=env),
        validate=sh(ingest, "validate", cwd=user, env=with_vars),
        status_without_spark=sh(ingest, "status", "pipelines/clicks.yml", cwd=user, env=with_vars),
        validate_strict=sh(ingest, "validate", "--strict", cwd=user, env=with_vars))
    ok(sh(*install, f"{wheel}[spark]", cwd=root, env=env))
    return installed


@pytest.fixture(scope="session")
def demo_run(installed_wheel, tmp_path_factory):
    """One `ingest demo` of the installed wheel (a child process, its own broker) for the
    demo, notebook and wheel tests: the package as users get it, run once for all three."""
    root = tmp_path_factory.mktemp("demo")
    (root / "tables" / "yours").mkdir(parents=True)  # a table of your own under the same DATA_ROOT
    (root / "tables" / "yours" / "part-0").write_text("your table")
    done = sh(installed_wheel.ingest, "demo", "--data-root", root, cwd=installed_wheel.user,
              env=installed_wheel.env, timeout=1800)
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
