"""`ingest run --remote sc://...` against a Connect server started apart, as on Databricks:
the client is its own process and holds no JVM; the server can die under it and come back.

Nothing here opens a Spark session in the test process: the runs and `verify` are child
processes, and the tables are read with delta-rs (`deltalake`) and the Delta log's JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable as RustTable

from tests.connect.server import ConnectServer
from tests.connect.test_run import orders, send
from tests.integration.processes import ROOT, IngestProcess, write_pipeline


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = ConnectServer(tmp_path_factory.mktemp("connect-server") / "server.log")
    started.start()
    yield started
    started.stop()


@pytest.fixture
def no_java(tmp_path) -> tuple[dict, Path]:
    """A client environment where any `java` (pyspark's launcher, Maven) is a stand-in that
    leaves its arguments in a file and fails: a JVM start in the client cannot go unseen."""
    home = tmp_path / "no-java"
    (home / "bin").mkdir(parents=True)
    attempts = tmp_path / "java-attempts.txt"
    stand_in = home / "bin" / "java"
    stand_in.write_text(f'#!/bin/sh\necho "java $*" >> {attempts}\nexit 1\n')
    stand_in.chmod(0o755)
    return {"JAVA_HOME": str(home), "PATH": f"{home / 'bin'}:{os.environ['PATH']}"}, attempts


def remote_run(pipeline_file: Path, kafka, server: ConnectServer, log: Path, env: dict | None = None):
    return IngestProcess(pipeline_file, kafka.bootstrap, log, extra_env=env,
                         extra_args=("--remote", server.url))


def remote_verify(pipeline_file: Path, kafka, server: ConnectServer, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "ingest", "verify", str(pipeline_file)], cwd=ROOT,
                          env={**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap, "SPARK_REMOTE": server.url,
                               **(env or {})},
                          capture_output=True, text=True, timeout=600)


def uids(table: Path) -> list[str]:
    return RustTable(str(table)).to_pyarrow_table(columns=["_uid"]).column("_uid").to_pylist()


def txn_commits(table: Path) -> list[tuple[int, str, int]]:
    """(table version, txn app id, txn version) of every commit in the Delta log that carries a txn."""
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found.append((int(commit.stem), action["txn"]["appId"], action["txn"]["version"]))
    return found


def batch_lines(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{name} batch ")]


def test_a_remote_run_is_exact_and_starts_no_jvm_in_the_client(server, kafka, topic, tmp_path, no_java):
    """`python -m ingest run --remote sc://...` as a process of its own whose `java` is a stand-in:
    the whole run, `import ingest` to its exit, and `ingest verify` after it, never start one."""
    env, java_attempts = no_java
    retried = orders(4)[:2]  # the producer's retries: the same uids again, at new offsets
    send(kafka, topic, orders(10) + retried + [("bad", b"{oops", 0)])
    pipeline_file = write_pipeline(tmp_path, topic, name="remote_orders")

    run = remote_run(pipeline_file, kafka, server, tmp_path / "run.log", env)
    code = run.wait(timeout=600)

    output = run.output()
    assert code == 0, output[-3000:]
    assert not java_attempts.exists(), f"the client started a JVM: {java_attempts.read_text()}"
    lines = batch_lines(output, "remote_orders")
    assert lines and sum(int(line.split("read ")[1].split(",")[0]) for line in lines) == 13, output
    assert f"remote_orders: done after {len(lines)} batch(es)" in output
    target = uids(tmp_path / "tables" / "remote_orders")
    assert sorted(target) == [f"u{i:04d}" for i in range(10)]
    dead = RustTable(str(tmp_path / "dead_letter" / "remote_orders")).to_pyarrow_table().to_pylist()
    assert [(d["stage"], d["value"]) for d in dead] == [("decode", b"{oops")]

    audit = remote_verify(pipeline_file, kafka, server, env)
    assert audit.returncode == 0 and "OK" in audit.stdout, audit.stdout + audit.stderr
    assert not java_attempts.exists(), f"verify started a JVM: {java_attempts.read_text()}"


