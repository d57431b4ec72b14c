"""`ingest run --remote sc://...` against a Connect server started apart, as on Databricks:
the client is its own process and holds no JVM; the server can die under it and come back.

Nothing here opens a Spark session in the test process: the runs and `verify` are child
processes, and the tables are read with delta-rs (`deltalake`) and the Delta log's JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable as RustTable

from tests.connect.server import IN_PROCESS_SERVER_VARIABLES, ConnectServer
from tests.connect.test_run import orders, send
from tests.integration.processes import ROOT, IngestProcess, wait_for, write_pipeline


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = ConnectServer(tmp_path_factory.mktemp("connect-server") / "server.log")
    started.start()
    yield started
    started.stop()


@pytest.fixture(autouse=True)
def client_apart(monkeypatch):
    """The runs here are clients of the server started apart, whatever server another
    module's fixture started in this process."""
    for variable in IN_PROCESS_SERVER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


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


def test_the_server_killed_between_the_delta_commit_and_the_checkpoint(server, kafka, topic, tmp_path, no_java):
    """The issue's crash test on Connect: the server dies after batch 1's MERGE committed and
    before Spark committed the batch to the checkpoint; on a new server the batch is run again
    under the same txn id, which Delta skips."""
    env, java_attempts = no_java
    sent = orders(20)
    send(kafka, topic, sent + sent[:2] + [("bad", b"{oops", 1)])  # two retries and a bad record, at the end
    pipeline_file = write_pipeline(tmp_path, topic, name="remote_killed")
    spec = yaml.safe_load(pipeline_file.read_text())
    spec["source"]["kafka"]["max_offsets_per_trigger"] = 10  # three batches or so
    pipeline_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    target = tmp_path / "tables" / "remote_killed"
    checkpoint_commits = tmp_path / "checkpoints" / "remote_killed" / "commits"

    run = remote_run(pipeline_file, kafka, server, tmp_path / "run.log", env)
    table_version, app, batch = wait_for(lambda: commit_of_batch(target, 1, run), 900,
                                         "batch 1's commit in the target", lambda: run.output()[-3000:], poll=0.005)
    server.kill()
    killed = time.monotonic()

    assert not (checkpoint_commits / str(batch)).exists(), "the kill came after the checkpoint's commit"
    assert run.wait(timeout=600) == 1
    took = time.monotonic() - killed
    print(f"the client exited {took:.1f}s after the server's kill")
    # a minute of retries of the call that finds the server gone, then the calls beside it end
    # at their next retry (at most 10 s); 71 to 127 s were measured while other waits added up
    assert took < 100, f"the client exited {took:.0f}s after the server's kill"
    output = run.output()
    assert "error: pipeline remote_killed: the Spark Connect server stopped answering under the run " in output
    assert f"127.0.0.1:{server.port}" in output and "Traceback" not in output, output[-3000:]
    assert "RETRIES_EXCEEDED" not in output, output[-3000:]
    assert len(batch_lines(output, "remote_killed")) == 1  # batch 0's; batch 1's report died with the server

    server.start()  # the same port, a new JVM: nothing of the old one's state
    again = remote_run(pipeline_file, kafka, server, tmp_path / "again.log", env)
    assert again.wait(timeout=900) == 0, again.output()[-3000:]

    assert not java_attempts.exists(), f"the client started a JVM: {java_attempts.read_text()}"
    commits = txn_commits(target)
    versions = [version for _, _, version in commits]
    assert versions == list(range(len(versions))) and len(versions) >= 3, commits  # batch 1 committed once
    assert (table_version, app, batch) in commits and {a for _, a, _ in commits} == {app}
    target_uids = uids(target)
    assert sorted(target_uids) == sorted(uid for uid, _, _ in sent)  # each once: nothing lost or doubled
    dead_letters = tmp_path / "dead_letter" / "remote_killed"
    assert [d["value"] for d in RustTable(str(dead_letters)).to_pyarrow_table().to_pylist()] == [b"{oops"]
    assert len(txn_commits(dead_letters)) == 1
    audit = remote_verify(pipeline_file, kafka, server, env)
    assert audit.returncode == 0 and "OK" in audit.stdout, audit.stdout + audit.stderr


def test_the_batch_worker_killed_between_the_delta_commit_and_the_checkpoint(server, kafka, topic, tmp_path):
    """The server stays up and the Python worker running the batch function dies after batch
    1's MERGE committed, before its checkpoint commit: the query fails, the run exits 1 naming
    the batch, and the next run on the same server replays the batch under the same txn id."""
    sent = orders(20)
    send(kafka, topic, sent + sent[:2] + [("bad", b"{oops", 1)])
    pipeline_file = write_pipeline(tmp_path, topic, name="worker_killed",
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                                     "max_offsets_per_trigger": 10}})
    target = tmp_path / "tables" / "worker_killed"
    checkpoint_commits = tmp_path / "checkpoints" / "worker_killed" / "commits"

    run = remote_run(pipeline_file, kafka, server, tmp_path / "run.log")
    table_version, app, batch = wait_for(lambda: commit_of_batch(target, 1, run), 900,
                                         "batch 1's commit in the target", lambda: run.output()[-3000:], poll=0.005)
    [worker] = batch_workers(server)
    os.kill(worker, signal.SIGKILL)

    assert not (checkpoint_commits / str(batch)).exists(), "the kill came after the checkpoint's commit"
    assert run.wait(timeout=600) == 1
    output = run.output()
    assert "error: pipeline worker_killed failed in batch 1 " in output, output[-3000:]
    assert server.process.poll() is None  # the server lived on

    again = remote_run(pipeline_file, kafka, server, tmp_path / "again.log")
    assert again.wait(timeout=900) == 0, again.output()[-3000:]

    commits = txn_commits(target)
    versions = [version for _, _, version in commits]
    assert versions == list(range(len(versions))) and len(versions) >= 3, commits  # batch 1 committed once
    assert (table_version, app, batch) in commits and {a for _, a, _ in commits} == {app}
    assert sorted(uids(target)) == sorted(uid for uid, _, _ in sent)
    dead_letters = tmp_path / "dead_letter" / "worker_killed"
    assert [d["value"] for d in RustTable(str(dead_letters)).to_pyarrow_table().to_pylist()] == [b"{oops"]
    audit = remote_verify(pipeline_file, kafka, server)
    assert audit.returncode == 0 and "OK" in audit.stdout, audit.stdout + audit.stderr


def batch_workers(server: ConnectServer) -> list[int]:
    """The pids of the server's foreachBatch workers (Python processes it started)."""
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True, text=True).stdout
    group = os.getpgid(server.process.pid)
    return [int(pid) for pid, pgid, args in (line.split(None, 2) for line in listing.splitlines())
            if int(pgid) == group and "foreach_batch_worker" in args]


def commit_of_batch(table: Path, batch: int, run: IngestProcess):
    """(table version, app id, batch) of the batch's commit once the Delta log has it; fails
    if the run ended first."""
    assert run.process.poll() is None, f"the run ended before batch {batch} committed:\n{run.output()[-3000:]}"
    if not (table / "_delta_log").is_dir():
        return None
    return next((commit for commit in txn_commits(table) if commit[2] == batch), None)


def test_a_server_that_is_not_there_fails_the_run_at_once_naming_it(kafka, topic, tmp_path, no_java):
    """No server on the port: exit 1 within seconds, the address and what gRPC said, no
    traceback, and the URL's token never printed (the session is lazy: without the check
    at its start the first query failed a minute later with a traceback)."""
    from tests.connect.server import free_port

    env, java_attempts = no_java
    address = f"127.0.0.1:{free_port()}"
    pipeline_file = write_pipeline(tmp_path, topic, name="nowhere")
    started = time.monotonic()
    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "run.log", extra_env=env,
                        extra_args=("--remote", f"sc://{address}/;token=connect-secret-token"))
    code = run.wait(timeout=120)

    output = run.output()
    assert code == 1, output[-3000:]
    assert time.monotonic() - started < 45, output[-3000:]
    assert f"the Spark Connect server {address} cannot be reached" in output, output[-3000:]
    assert "Traceback" not in output and "connect-secret-token" not in output, output[-3000:]
    assert not java_attempts.exists()


def hidden_from_the_client(folder: Path) -> tuple[str, ...]:
    """A command prefix: the client runs in a mount namespace of its own where `folder` is an
    empty tmpfs, as a client on another machine sees nothing of the server's disk."""
    try:
        subprocess.run(["unshare", "-m", "true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("needs unshare -m (a mount namespace) to hide the server's folder from the client")
    return ("unshare", "-m", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(folder))


def test_the_guards_read_the_servers_checkpoint_not_the_clients_disk(server, kafka, topic, tmp_path):
    """Issue 57 point 6: the start plan, the checkpoint's state and the lease read the client's
    disk, while the query runs on the server. With the server's folder out of the client's
    sight, the checkpoint looked empty and a dropped target was not noticed: the run started
    the topic again into a new table."""
    import shutil

    send(kafka, topic, orders(5))
    name = "apart"
    data = tmp_path / "server-data"
    data.mkdir()
    pipeline_file = write_pipeline(data, topic, name=name)
    pipeline_file = pipeline_file.rename(tmp_path / pipeline_file.name)  # the client reads it
    hidden = hidden_from_the_client(data)
    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "first.log",
                        extra_args=("--remote", server.url), prefix=hidden)
    assert run.wait(timeout=600) == 0, run.output()[-3000:]
    assert (data / "checkpoints" / name / "commits" / "0").is_file()
    assert sorted(uids(data / "tables" / name)) == [f"u{i:04d}" for i in range(5)]

    shutil.rmtree(data / "tables" / name)
    send(kafka, topic, orders(8)[5:])
    again = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "second.log",
                          extra_args=("--remote", server.url), prefix=hidden)
    code = again.wait(timeout=600)
    output = again.output()
    assert code == 1 and "does not exist (dropped, or its path or name changed)" in output, output[-3000:]
    assert not (data / "tables" / name).exists()  # nothing was written in its place


LOSE_THE_SERVER_AT_START = """
import os, signal, sys
from ingest.errors import IngestError
from ingest.platform.connect import connect_session
from ingest.spec.loader import load_file
from ingest.stream.supervisor import Supervisor

pipeline = load_file(sys.argv[1], environ={"KAFKA_BOOTSTRAP": sys.argv[2]}).pipeline
session = connect_session(sys.argv[3])
supervisor = Supervisor([pipeline], once=True, on_report=lambda *_: None, on_note=print)
supervisor.claim()
os.killpg(int(sys.argv[4]), signal.SIGKILL)  # the server dies as the run starts its query
try:
    supervisor.start(session)
except IngestError as error:
    print(f"error: {error}")
    sys.exit(1)
print("started")
"""


def test_a_server_lost_while_the_run_starts_is_the_stopped_answering_line(server, kafka, topic, tmp_path):
    """Issue 57 point 7: a server lost while `start()` started the query ended in a raw
    `SparkConnectGrpcException: UNAVAILABLE` traceback, not the line a loss under the run gives."""
    send(kafka, topic, orders(2))
    pipeline_file = write_pipeline(tmp_path, topic, name="lost_at_start")
    try:
        child = subprocess.run([sys.executable, "-c", LOSE_THE_SERVER_AT_START, str(pipeline_file), kafka.bootstrap,
                                server.url, str(server.process.pid)],
                               cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        server.kill()
        server.start()  # for the module's other tests
    output = child.stdout + child.stderr
    assert child.returncode == 1, output[-3000:]
    assert "error: the Spark Connect server stopped answering while the run started" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def delta_versions(table: Path) -> list[int]:
    log = table / "_delta_log"
    return sorted(int(f.stem) for f in log.glob("*.json")) if log.is_dir() else []


def sockets_of(pid: int) -> int:
    """How many sockets the process holds open."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


def one_new_worker(server: ConnectServer, known: set[int], run: IngestProcess) -> int | None:
    assert run.process.poll() is None, f"the run ended before its batch worker started:\n{run.output()[-3000:]}"
    new = set(batch_workers(server)) - known
    return new.pop() if len(new) == 1 else None


def test_a_killed_clients_batch_commits_nothing_once_the_rerun_started(server, kafka, topic, tmp_path):
    """Issue 57 point 7, as a scheduler retries a job: the client is SIGKILLed while its query's
    batch 1 is inside the server's Python worker (held there: the worker is stopped with SIGSTOP
    before the batch's first commit), the server lives on, and the same run starts again. Once the
    rerun started, that batch must commit nothing: the rerun finds the pipeline's query on the
    server and stops and fences it before its own query starts. Before, the old query's worker,
    resumed, committed its batch under the pipeline's txn app id beside the rerun's batches
    (`[DELTA_CONCURRENT_TRANSACTION]` when they met)."""
    sent = orders(20)
    send(kafka, topic, sent[:10] + [("bad", b"{oops", 0)] + sent[10:])  # batch 1 has a dead letter
    name = "killed_client"
    pipeline_file = write_pipeline(tmp_path, topic, name=name,
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                                     "max_offsets_per_trigger": 10}})
    target, dead_letters = tmp_path / "tables" / name, tmp_path / "dead_letter" / name
    checkpoint = tmp_path / "checkpoints" / name
    idle = set(batch_workers(server))

    first = remote_run(pipeline_file, kafka, server, tmp_path / "first.log")
    old_worker = wait_for(lambda: one_new_worker(server, idle, first), 600, "the first run's batch worker",
                          lambda: first.output()[-3000:])

    def batch_1_planned():
        assert first.process.poll() is None, f"the first run ended:\n{first.output()[-3000:]}"
        return (checkpoint / "offsets" / "1").is_file()

    wait_for(batch_1_planned, 600, "batch 1's offsets", lambda: first.output()[-3000:], poll=0.005)
    os.kill(old_worker, signal.SIGSTOP)  # batch 1 held inside the worker
    try:
        assert not any(version == 1 for _, _, version in txn_commits(target)), "held too late: batch 1 committed"
        first.kill()
        held = (delta_versions(target), delta_versions(dead_letters))

        again = remote_run(pipeline_file, kafka, server, tmp_path / "again.log")
        new_worker = wait_for(lambda: one_new_worker(server, idle | {old_worker}, again), 600,
                              "the rerun's batch worker", lambda: again.output()[-3000:])
        # connected back to the server first: a worker held before that fails the rerun's start
        wait_for(lambda: sockets_of(new_worker), 120, "the rerun's worker's connection to the server",
                 lambda: server.output()[-3000:])
        time.sleep(1)  # and through its handshake
        os.kill(new_worker, signal.SIGSTOP)  # the rerun's batches wait: the old worker runs alone
        os.kill(old_worker, signal.SIGCONT)
        try:
            wait_for(lambda: old_worker not in batch_workers(server), 120, "the old batch worker's exit",
                     lambda: server.output()[-3000:])
        finally:
            os.kill(new_worker, signal.SIGCONT)
        late = (delta_versions(target), delta_versions(dead_letters))
    finally:
        try:
            os.kill(old_worker, signal.SIGCONT)  # never left stopped, whatever failed
        except ProcessLookupError:
            pass
    assert late == held, f"the killed client's batch committed after the rerun started: {held} -> {late}"

    assert again.wait(timeout=900) == 0, again.output()[-3000:]
    commits = txn_commits(target)
    versions = [version for _, _, version in commits]
    assert versions == list(range(len(versions))) and len(versions) >= 3, commits
    assert sorted(uids(target)) == sorted(uid for uid, _, _ in sent)
    assert [d["value"] for d in RustTable(str(dead_letters)).to_pyarrow_table().to_pylist()] == [b"{oops"]
    assert "stopped its query" in again.output() and "left on the Spark Connect server" in again.output()
    audit = remote_verify(pipeline_file, kafka, server)
    assert audit.returncode == 0 and "OK" in audit.stdout, audit.stdout + audit.stderr
