"""`ingest run` under spark-submit on a real Spark standalone cluster.

A master and one worker (1 core, 1g) from pyspark's own jars, on loopback; the
Kafka source and the MERGE run on the worker's executor, the micro-batch
function on the driver, as on any OSS cluster. One application runs a JSON and an
Avro pipeline (the Avro one decodes in the executor's Python, an Arrow UDF, with the
registry stand-in) and its executor's JVM is SIGKILLed mid-run: the worker starts a
new one, tasks are retried, and the tables must still hold every uid exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ingest.kafka.local_broker import C1_ONLY, _die_with_parent, free_port
from tests.integration.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of the daemons and of spark-submit: pyspark's folder as
    SPARK_HOME (the worker builds the executor's classpath from it; the pip
    package has no RELEASE file, so the Scala version must be given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INGEST_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(pyspark_home()), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_SCALA_VERSION="2.13", PYSPARK_PYTHON=sys.executable,
               PYTHONUNBUFFERED="1", **extra)
    return env


def start_group(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """A process in its own group (stopped with its children), tied to this one."""
    with open(log, "ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)


def stop_group(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class StandaloneCluster:
    """A Spark standalone master and one worker; every process in `processes`
    is stopped by `stop`, spark-submit's included."""

    def __init__(self, work: Path):
        self.work = work
        self.processes: list[subprocess.Popen] = []
        self.url = ""
        self.worker: subprocess.Popen | None = None

    def start(self) -> None:
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self._daemon("master", "org.apache.spark.deploy.master.Master",
                     "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()))
        self.worker = self._daemon("worker", "org.apache.spark.deploy.worker.Worker", self.url,
                                   "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                   "--webui-port", str(free_port()),
                                   "--work-dir", str(self.work / "executors"))
        wait_for(lambda: "Successfully registered with master" in self.log("worker"),
                 120, "the worker to register", lambda: self.log("worker")[-3000:])

    def _daemon(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        # No REST submission server: its fixed port 6066 would clash with another cluster
        command = ["java", "-Xmx256m", "-XX:+UseSerialGC", C1_ONLY, "-Dspark.master.rest.enabled=false",
                   "-cp", f"{pyspark_home() / 'jars'}/*", main_class, *args]
        process = start_group(command, self.work / f"{name}.log", spark_env())
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def submit(self, args: list[str], log: Path, **env: str) -> subprocess.Popen:
        command = [str(pyspark_home() / "bin" / "spark-submit"), "--master", self.url,
                   "--driver-memory", "1g", "--executor-memory", "1g",
                   # C1 only, as the suite's other child JVMs (tests/child_jvms.py says why)
                   "--conf", f"spark.driver.defaultJavaOptions={C1_ONLY}",
                   "--conf", f"spark.executor.defaultJavaOptions={C1_ONLY}",
                   "--total-executor-cores", "1",
                   "--conf", "spark.sql.shuffle.partitions=2",
                   # Delta rebuilds a table's state in 50 tasks by default: long on one core
                   "--conf", "spark.databricks.delta.snapshotPartitions=2",
                   "--conf", "spark.ui.enabled=false", *args]
        process = start_group(command, log, spark_env(**env))
        self.processes.append(process)
        return process

    def executor_pids(self) -> list[int]:
        """The executor JVMs this worker started (children of its JVM only:
        other engineers' Spark processes on this machine are none of ours)."""
        return [pid for pid, parent, command in _processes()
                if parent == self.worker.pid and EXECUTOR_CLASS in command]

    def executors_started(self) -> int:
        """Executors the worker has launched so far, over all applications."""
        root = self.work / "executors"
        return sum(1 for app in root.glob("app-*") for _ in app.iterdir()) if root.exists() else 0

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_group(process)


def _processes():
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        yield int(entry.name), parent, command


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark_jars() -> str:
    """Delta and the Kafka connector for spark-submit's --jars, from the jar cache."""
    from ingest.platform.jars import resolve_spark_jars

    return ",".join(str(jar) for jar in resolve_spark_jars())


def write_pipeline(folder: Path, topic: str, batch: int) -> Path:
    document = {
        "name": "orders",
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                             "max_offsets_per_trigger": batch},
                   "format": "json",
                   "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"},
        "uid": {"header": "message-id"},
        "target": {"path": "${DATA_ROOT}/tables/orders"},
        "checkpoint": "${DATA_ROOT}/checkpoints/orders",
        "dead_letter": {"path": "${DATA_ROOT}/dead_letter/orders"},
    }
    path = folder / "orders.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def send_orders(sender, count: int, retry_every: int = 10) -> set[str]:
    """`count` orders over both partitions, every `retry_every`th sent twice
    (a producer retry: same uid, new offset); returns the uids."""
    uids = set()
    for i in range(count):
        uid = f"u-{i:05d}"
        order = {"order_id": f"o{i}", "amount": float(i), "ts": "2026-11-01T10:00:00"}
        copies = 2 if i % retry_every == 0 else 1
        for _ in range(copies):
            sender.send(order, uid=uid, partition=i % 2)
        uids.add(uid)
    sender.flush()
    return uids


def run_args(pipeline_file: Path, jars: str) -> list[str]:
    return ["--jars", jars, str(ROOT / "ingest" / "__main__.py"), "run", str(pipeline_file), "--once"]


def column(table: Path, name: str) -> list:
    """One column of a Delta table, read with delta-rs: no second JVM in this process."""
    from deltalake import DeltaTable, QueryBuilder

    rows = QueryBuilder().register("t", DeltaTable(str(table))).execute(f"SELECT {name} FROM t").read_all()
    return rows[name].to_pylist()


def ingest_commits(table: Path) -> int:
    """Commits in the Delta log made by a micro-batch (they carry our ledger entry)."""
    count = 0
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and '"ingest":1' in (info.get("userMetadata") or ""):
                count += 1
    return count


def finish(process: subprocess.Popen, log: Path, timeout: float) -> None:
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(process)
        raise AssertionError(f"spark-submit still running after {timeout}s:\n{_tail(log)}") from None
    assert code == 0, f"spark-submit exited {code}:\n{_tail(log)}"


def _tail(log: Path, chars: int = 6000) -> str:
    return log.read_text(errors="replace")[-chars:]


def test_spark_submit_lands_json_and_avro_once_each_through_a_killed_executor(
        cluster, spark_jars, kafka, sender, topic, registry, tmp_path):
    """One application running two pipelines (`ingest run a.yaml b.yaml`, one driver and one
    executor start for both): JSON orders with producer retries and a malformed record, and
    Avro orders, decoded in an Arrow UDF, so in the executor's Python: docs/cluster.md's list
    of what an executor needs (the wheel, fastavro, pyarrow) is this test's PYSPARK_PYTHON.
    After the JSON pipeline's first commit the executor's JVM is SIGKILLed: the worker starts
    a new one, the tasks are retried, and each table still holds every uid once."""
    from ingest.kafka.local_broker import create_topic
    from tests.integration.conftest import REGISTRY_PASSWORD, REGISTRY_USER, Sender
    from tests.integration.test_avro import ORDER_V1, order, serialized

    uids = send_orders(sender, 120)
    sender.send(b"{not json", uid="bad-json")
    sender.flush()
    avro_topic = f"{topic}-avro"
    create_topic(kafka.client_config(), avro_topic, partitions=2)
    avro_sender = Sender(kafka, avro_topic)
    avro_uids = {f"a-{i:03d}" for i in range(1, 21)}
    for uid in sorted(avro_uids):
        i = int(uid[2:])
        avro_sender.send(serialized(registry, avro_topic, ORDER_V1, order(i)), uid=uid, partition=i % 2)
    avro_sender.flush()
    # 133 records, 40 offsets a batch: four batches, so the run goes on after the first commit
    json_file = write_pipeline(tmp_path, topic, batch=40)
    document = yaml.safe_load(json_file.read_text())
    document["source"] = {**document["source"], "format": "avro", "registry": {
        "url": registry.url, "auth": {"basic": "${SR_USER}:${SR_PASSWORD}"}}}
    document["source"]["kafka"]["topics"] = [avro_topic]
    del document["source"]["schema"]
    document.update(name="orders_avro", target={"path": "${DATA_ROOT}/tables/orders_avro"},
                    checkpoint="${DATA_ROOT}/checkpoints/orders_avro",
                    dead_letter={"path": "${DATA_ROOT}/dead_letter/orders_avro"})
    avro_file = tmp_path / "orders_avro.yaml"
    avro_file.write_text(yaml.safe_dump(document, sort_keys=False))
    data_root = tmp_path / "data"
    log = tmp_path / "submit.log"
    launched_before = cluster.executors_started()
    earlier = set(cluster.executor_pids())  # the last application's, maybe still exiting
    args = [*run_args(json_file, spark_jars)[:-1], str(avro_file), "--once"]
    process = cluster.submit(args, log, KAFKA_BOOTSTRAP=kafka.bootstrap, DATA_ROOT=str(data_root),
                             SR_USER=REGISTRY_USER, SR_PASSWORD=REGISTRY_PASSWORD)
    table = data_root / "tables" / "orders"
    [executor] = wait_for(lambda: set(cluster.executor_pids()) - earlier, 180,
                          "the application's executor", lambda: _tail(log))
    wait_for(lambda: process.poll() is not None or ingest_commits(table) >= 1, 300,
             "a first committed batch", lambda: _tail(log))
    assert process.poll() is None, f"the run ended before the executor could be killed:\n{_tail(log)}"
    os.kill(executor, signal.SIGKILL)
    committed_at_kill = ingest_commits(table)
    finish(process, log, timeout=600)

    assert cluster.executors_started() - launched_before >= 2, "no new executor after the kill"
    assert ingest_commits(table) > committed_at_kill, "no batch committed after the kill"
    landed = column(table, "_uid")
    assert len(landed) == len(set(landed)), "a uid landed twice"
    assert set(landed) == uids
    assert column(data_root / "dead_letter" / "orders", "stage") == ["decode"]

    target, dead = data_root / "tables" / "orders_avro", data_root / "dead_letter" / "orders_avro"
    assert sorted(column(target, "_uid")) == sorted(avro_uids), "every Avro record once"
    assert sorted(column(target, "order_id")) == sorted(f"o{i}" for i in range(1, 21))  # decoded
    assert not (dead / "_delta_log").exists() or column(dead, "stage") == [], "a record failed to decode"


def test_a_jar_folder_under_spark_submit_is_refused_with_advice(cluster, spark_jars, kafka, topic,
                                                                  tmp_path):
    folder = str(Path(spark_jars.split(",")[0]).parent)
    log = tmp_path / "submit.log"
    args = [str(ROOT / "ingest" / "__main__.py"), "run", str(write_pipeline(tmp_path, topic, 100)), "--once"]
    process = cluster.submit(args, log, INGEST_JARS=folder, KAFKA_BOOTSTRAP=kafka.bootstrap,
                             DATA_ROOT=str(tmp_path / "data"))
    try:
        code = process.wait(timeout=300)
    finally:
        stop_group(process)
    assert code == 1, _tail(log)
    assert "give the jars to spark-submit instead: --jars" in log.read_text(), _tail(log)
