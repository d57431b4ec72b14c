"""A session that someone else made (Databricks, a notebook) is used as it is,
and catalog table names work for the target and the dead letters."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

# Runs in its own process: a SparkSession is made here, outside ingest, the
# way a Databricks runtime or a notebook makes it, then ingest runs on it.
OUTSIDE_SESSION = r'''
import json, os, sys, types
from pyspark.sql import SparkSession

pipeline_file, conf_dir, jars, warehouse, bootstrap, out = sys.argv[1:7]
spark = (SparkSession.builder.master("local[1]").appName("made-outside")
         .config("spark.jars", jars)
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
         # qualified already: Spark would qualify a bare path itself on first use
         .config("spark.sql.warehouse.dir", "file:" + warehouse)
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "3")
         .config("spark.sql.session.timeZone", "Pacific/Chatham")
         .config("spark.outside.marker", "kept")
         .getOrCreate())


def settings():
    return {"context": dict(spark.sparkContext.getConf().getAll()),
            "session": {row.key: row.value for row in spark.sql("SET").collect()}}


# Databricks' dbutils, reduced to what ingest calls: the secret scope.
secret_reads, dbutils_sessions = [], []


class _Secrets:
    def get(self, scope, key):
        secret_reads.append([scope, key])
        return {("ingest-test", "kafka-bootstrap"): bootstrap}[(scope, key)]


class DBUtils:
    def __init__(self, session):
        dbutils_sessions.append(session)
        self.secrets = _Secrets()


sys.modules["pyspark.dbutils"] = types.SimpleNamespace(DBUtils=DBUtils)
os.environ["DATABRICKS_RUNTIME_VERSION"] = "15.4"
before = settings()

from ingest.platform.session import get_session
from ingest.entry import run_job

handed_back = get_session("ingest-run", conf={"spark.sql.shuffle.partitions": "9"}) is spark
try:
    run_job([pipeline_file, "--once", "--env", "databricks", "--conf-dir", conf_dir])
    code = 0
except SystemExit as stop:
    code = stop.code
rows = spark.read.format("delta").load(os.environ["DATA_ROOT"] + "/tables/orders").select("_uid").collect()
json.dump({"handed_back": handed_back, "code": code, "before": before, "after": settings(),
           "secret_reads": secret_reads,
           "dbutils_got_the_session": all(s is spark for s in dbutils_sessions) and bool(dbutils_sessions),
           "uids": sorted(r._uid for r in rows)}, open(out, "w"))
'''


def order(i: int) -> dict:
    return {"order_id": f"o{i}", "amount": float(i), "ts": "2026-11-01T10:00:00"}


def write_pipeline(folder: Path, topic: str, target: dict, dead_letter: dict | None) -> Path:
    document = {
        "name": "orders",
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic]},
                   "format": "json",
                   "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"},
        "uid": {"header": "message-id"},
        "target": target,
        "checkpoint": "${DATA_ROOT}/checkpoints/orders",
    }
    if dead_letter is not None:
        document["dead_letter"] = dead_letter
    path = folder / "orders.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_a_session_made_outside_is_used_as_it_is(kafka, sender, topic, tmp_path):
    from ingest.platform.jars import resolve_spark_jars

    for i in range(6):
        sender.send(order(i), uid=f"u-{i}", partition=i % 2)
    sender.send(order(0), uid="u-0", partition=1)  # a producer retry
    sender.flush()
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    # as conf/databricks.yaml: the bootstrap servers come from the secret scope here
    (conf_dir / "databricks.yaml").write_text(
        "secret_scope: ingest-test\nsecrets:\n  KAFKA_BOOTSTRAP: kafka-bootstrap\n")
    pipeline = write_pipeline(tmp_path, topic, {"path": "${DATA_ROOT}/tables/orders"},
                              {"path": "${DATA_ROOT}/dead_letter/orders"})
    script, out = tmp_path / "outside.py", tmp_path / "outside.json"
    script.write_text(OUTSIDE_SESSION)
    jars = ",".join(str(j) for j in resolve_spark_jars())
    env = _clean_env(DATA_ROOT=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, str(script), str(pipeline), str(conf_dir), jars,
                           str(tmp_path / "warehouse"), kafka.bootstrap, str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0 and out.exists(), done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads(out.read_text())

    assert result["handed_back"] and result["code"] == 0, done.stdout + done.stderr[-3000:]
    assert result["after"] == result["before"], _changed(result["before"], result["after"])
    assert result["after"]["session"]["spark.sql.session.timeZone"] == "Pacific/Chatham"
    assert result["after"]["context"]["spark.outside.marker"] == "kept"
    assert result["after"]["session"]["spark.sql.shuffle.partitions"] == "3"
    assert result["uids"] == [f"u-{i}" for i in range(6)]
    assert {tuple(r) for r in result["secret_reads"]} == {("ingest-test", "kafka-bootstrap")}
    assert result["dbutils_got_the_session"]
    assert kafka.bootstrap not in done.stdout  # a scope's value is a secret: masked in the output


def _clean_env(**extra: str) -> dict[str, str]:
    """Nothing of ingest's, Databricks' or Kafka's from this process; the suite's options for a
    child's JVM (tests/child_jvms.py) stay: they are in the session's settings before ingest runs."""
    import os

    from tests import child_jvms

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("INGEST_", "PYSPARK_", "DATABRICKS_", "KAFKA_")) or k == child_jvms.VARIABLE}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT), **extra}


def _changed(before: dict, after: dict) -> str:
    lines = []
    for part in ("context", "session"):
        keys = set(before[part]) | set(after[part])
        lines += [f"{part}: {k}: {before[part].get(k)!r} -> {after[part].get(k)!r}"
                  for k in sorted(keys) if before[part].get(k) != after[part].get(k)]
    return "\n".join(lines)


@pytest.fixture
def database(spark, tmp_path):
    """A database of its own under tmp_path: the test session outlives the test."""
    name = f"ingest_{uuid.uuid4().hex[:12]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{tmp_path / 'warehouse'}'")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


def run_cli(*args: str) -> int:
    from ingest.cli import main

    return main(["run", *args, "--once"])


def test_catalog_names_for_target_and_dead_letters(spark, database, sender, kafka, topic, tmp_path,
                                                    monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "data"))
    target, dead = f"spark_catalog.{database}.orders", f"{database}.orders_rejected"
    pipeline = write_pipeline(tmp_path, topic, {"table": target}, {"table": dead})
    sender.send(order(1), uid="u-1")
    sender.send(b"{not json", uid="bad")
    sender.send(order(1), uid="u-1", partition=1)  # a producer retry
    sender.flush()
    assert run_cli(str(pipeline), "--conf-dir", str(tmp_path)) == 0, capsys.readouterr()
    sender.send(order(2), uid="u-2")
    sender.send(order(1), uid="u-1")
    sender.flush()
    assert run_cli(str(pipeline), "--conf-dir", str(tmp_path)) == 0, capsys.readouterr()

    uids = sorted(r._uid for r in spark.table(target).collect())
    assert uids == ["u-1", "u-2"]
    assert [(r.stage, r._offset) for r in spark.table(dead).collect()] == [("decode", 1)]
    for table in (target, dead):
        location = spark.sql(f"DESCRIBE DETAIL {table}").first().location
        assert location.startswith(f"file:{tmp_path}/warehouse/")


def test_dead_letters_default_to_a_table_beside_a_catalog_target(spark, database, sender, kafka,
                                                                  topic, tmp_path, monkeypatch, capsys):
    from ingest.batch.commit.ledger import history_entries, recorded_offsets

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "data"))
    target = f"{database}.orders"
    pipeline = write_pipeline(tmp_path, topic, {"table": target}, None)
    sender.send(order(1), uid="u-1")
    sender.send(b"{not json", uid="bad", partition=1)
    sender.flush()
    assert run_cli(str(pipeline), "--conf-dir", str(tmp_path)) == 0, capsys.readouterr()

    assert [r._uid for r in spark.table(target).collect()] == ["u-1"]
    assert [r.stage for r in spark.table(f"{target}_dead_letter").collect()] == ["decode"]
    entries = history_entries(spark, target, True, "orders")
    assert recorded_offsets(entries) == {topic: {0: 1, 1: 1}}
