"""A Spark Connect session (a server started in this process) and the Kafka broker.

Its own pytest process (`make test-connect`): a Connect server refuses to start where
a classic session exists, and the classic suite's session is one per process, so the
classic run leaves this folder out (`norecursedirs` in pyproject.toml).
"""

from __future__ import annotations

import os
import sys

import pytest

from tests import child_jvms

CONNECT_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.databricks.delta.snapshotPartitions": "2",
}


@pytest.fixture(scope="session")
def connect_spark(kafka):
    """The broker first: a broker started once the Connect client's gRPC threads run failed
    once to start (its JVM exited -6, an epoll error in broker.log)."""
    pytest.importorskip("pandas", reason="the Connect client needs the connect extra: make test-connect")
    from pyspark.sql import SparkSession

    from ingest.platform.builder import LOCAL_DEFAULTS, configure_builder

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # foreachBatch's worker runs beside the server: this interpreter, with ingest installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = configure_builder(SparkSession.builder.remote("local[2]").appName("ingest-connect-tests"),
                                {**LOCAL_DEFAULTS, **CONNECT_TEST_CONF})
    with child_jvms.own_jvm_options():  # the server lives for the whole suite: not a child's C1 only
        session = builder.getOrCreate()
    yield session
    session.stop()
