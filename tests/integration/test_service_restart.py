"""What a service's next start meets after the kernel's OOM killer took the last one: its lease.

A pod that replaces an OOM-killed one has a new host name, so the lease names a holder it
cannot see: the new run waits until that holder's heartbeat is stale, saying so, then takes
the checkpoint and lands every record once; it does not exit into a crash loop. Both runs are
real `ingest run` processes, each in a UTS namespace of its own (`unshare`, root as in CI) with
a pod's host name, started with conf/<env>.yaml's `session:` as a service's conf/prod.yaml
sets it. (A container restarted in the same pod, the same host name in a pid namespace of
its own, waits the same way: tests/unit/stream/test_lease.py.)"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from confluent_kafka import Producer

from ingest.stream.lease import LEASE_FILE, STALE_AFTER_S
from tests.integration.processes import IngestProcess, wait_for, write_pipeline

SESSION = "session:\n  master: local[2]\n  driver_memory: 1g\n"


def send(kafka, topic, uids):
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for uid in uids:
        body = json.dumps({"order_id": uid, "amount": 1.0, "ts": "2026-11-01T10:00:00"}).encode()
        producer.produce(topic, body, headers=[("message-id", uid)])
    assert producer.flush(30) == 0


def in_pod(name: str) -> tuple[str, ...]:
    assert shutil.which("unshare"), "unshare (util-linux) gives each run a pod's host name"
    user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    return ("unshare", *user, "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh")


def jvm_command_line(pid: int) -> str:
    """The command line of `pid`'s child JVM, once it runs."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                line = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if "java" in line.split(" ", 1)[0]:
                    return line
        except (OSError, ValueError, IndexError):
            continue
    return ""


def test_a_pod_replacing_an_oom_killed_one_waits_out_its_lease_then_lands_every_record(
        spark, kafka, topic, tmp_path, monkeypatch, capsys):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "prod.yaml").write_text(SESSION)
    pipeline_file = write_pipeline(tmp_path, topic, trigger={"processing_time": "1 second"})
    arguments = ("--env", "prod", "--conf-dir", str(conf))
    send(kafka, topic, [f"a{i}" for i in range(30)])
    old = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "old.log", once=False,
                        extra_args=arguments, prefix=in_pod("ingest-orders-7d9f-old"))
    lease = tmp_path / "checkpoints" / "crashy" / LEASE_FILE
    try:
        # its first batch planned (Spark's offsets/0), its MERGE under way or done: the new pod
        # runs that batch again with the same offsets
        planned = tmp_path / "checkpoints" / "crashy" / "offsets" / "0"
        wait_for(planned.exists, 240, "the old pod's first batch", lambda: old.output()[-2000:])
        assert json.loads(lease.read_text())["host"] == "ingest-orders-7d9f-old"
    finally:
        old.kill()  # SIGKILL to ingest and its JVM at once, as the OOM killer's group kill
    send(kafka, topic, [f"b{i}" for i in range(30)])

    started = time.monotonic()
    new = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "new.log", once=True,
                        extra_args=arguments, prefix=in_pod("ingest-orders-7d9f-new"))
    wait_for(lambda: jvm_command_line(new.process.pid) or new.process.poll() is not None, 120,
             "the new pod's JVM", new.output)
    jvm = jvm_command_line(new.process.pid)
    assert jvm, f"the new pod's run ended before its JVM started:\n{new.output()[-3000:]}"
    assert "-Xmx1g" in jvm and "spark.master=local[2]" in jvm  # conf/<env>.yaml's session:
    code = new.wait(timeout=300)
    said = new.output()
    assert code == 0, said[-3000:]
    assert "note: crashy: the lease is held by host ingest-orders-7d9f-old" in said
    assert "waiting up to" in said
    assert "already running" not in said
    assert time.monotonic() - started < STALE_AFTER_S + 240

    landed = [r._uid for r in spark.read.format("delta").load(str(tmp_path / "tables" / "crashy")).collect()]
    assert sorted(landed) == sorted([f"a{i}" for i in range(30)] + [f"b{i}" for i in range(30)])
    assert not lease.exists()  # the new run held it, then gave it back
    from ingest.cli import main

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    assert main(["verify", str(pipeline_file)]) == 0, capsys.readouterr().out[-3000:]
