"""One SparkSession and one Kafka broker per test session; a fresh topic and tmp_path per test."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest

from tests import child_jvms, timing
from tests.timing import pytest_runtest_logreport, pytest_runtest_protocol, pytest_sessionfinish  # noqa: F401

DELTA_LOGS_CACHED = 16  # a test's tables, with room
TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    # Delta checks each commit's files against the log: keep the local test tables small and quick
    "spark.databricks.delta.snapshotPartitions": "2",
    **child_jvms.INTERPRETED,  # a few rows per batch: compiling Java for each plan cost more than it ran
    # The session outlives hundreds of tests, each with tables of its own: Delta keeps up to 10,000
    # tables' logs and cached states, Spark the last 1,000 SQL executions' plans and 100,000 tasks.
    # With those defaults the live heap grew to 0.5-1.3 GB of the 2 GB in a run of the suite, and
    # G1 started a marking cycle every few seconds: a fifth to a third of each session JVM's CPU.
    # Delta reads its cache size from a JVM property (DeltaLog.deltaLogCache), hence both keys.
    # The throughput collector, not G1: the suite wants CPU, not short pauses, and G1's concurrent
    # marking and write barriers cost more than ParallelGC's pauses (four matrix cells in one
    # process, idle, alternating: 185 and 200 s against 215 and 230 s with G1).
    "spark.driver.defaultJavaOptions": f"-XX:+UseParallelGC -Ddelta.log.cacheSize={DELTA_LOGS_CACHED}",
    "spark.databricks.delta.delta.log.cacheSize": str(DELTA_LOGS_CACHED),
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "2000",
    # What stays live is still 0.4-1 GB late in a run (plans and states the tests' objects hold): with a
    # 2 GB heap, G1 (the collector then) kept marking; two sessions of 4 GB and the children fit
    # the 24 GB of CI's machine.
    "spark.driver.memory": "4g",
    # ingest's System.gc() every 2 minutes gives a service's heap back; under ParallelGC it is a full
    # collection of the session's 0.4-1 GB live heap, for a session that lives for the suite: Spark's 30
    "spark.cleaner.periodicGC.interval": "30min",
}


@dataclass
class ExternalKafka:
    """A broker the user started: tests use it when KAFKA_BOOTSTRAP is set."""

    bootstrap: str

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}


def pytest_configure(config):
    timing.configure(os.environ.get("INGEST_DURATIONS"))
    child_jvms.configure(config.args)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, its units weighed and the longest handed out first (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirstScheduling

    return LongestFirstScheduling(config, log)


@pytest.fixture(scope="session")
def spark():
    from ingest.platform.session import get_session

    with timing.paid("spark_start"), child_jvms.own_jvm_options():
        session = get_session("ingest-tests", conf=TEST_SPARK_CONF, master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield ExternalKafka(os.environ["KAFKA_BOOTSTRAP"])
        return
    from ingest.kafka.local_broker import LocalKafka

    broker = LocalKafka(work_dir=tmp_path_factory.mktemp("kafka"))
    with timing.paid("broker_start"):
        broker.start()
    yield broker
    broker.close()


@pytest.fixture
def topic(kafka, request):
    """A new topic with 2 partitions, named after the test."""
    from ingest.kafka.local_broker import create_topic

    name = f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")
    create_topic(kafka.client_config(), name, partitions=2)
    return name
