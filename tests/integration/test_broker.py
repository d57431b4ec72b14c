"""`ingest broker`: a real broker for local development, stopped by Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from ingest.kafka.local_broker import free_port
from tests.integration.processes import ROOT


def start_broker(*args) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    return subprocess.Popen([sys.executable, "-m", "ingest", "broker", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# librdkafka's own log lines on stderr: `%6|1795901732.569|BGQUEUE|rdkafka#producer-2| ...`
LIBRDKAFKA_LINE = re.compile(r"^%\d\|[\d.]+\|[A-Z]+\|", re.MULTILINE)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_broker_prints_its_address_serves_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    broker = start_broker("--port", str(port), "--data-dir", str(tmp_path / "kafka"), "--topic", "hello:2")
    try:
        line = broker.stdout.readline().strip()
        assert line == f"export KAFKA_BOOTSTRAP=127.0.0.1:{port}", broker.stderr.read() if not line else line
        config = {"bootstrap.servers": f"127.0.0.1:{port}"}
        assert len(AdminClient(config).list_topics("hello", timeout=30).topics["hello"].partitions) == 2
        producer = Producer({**config, "enable.idempotence": True})
        producer.produce("hello", b"world")
        assert producer.flush(30) == 0
        consumer = Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["hello"])
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and not message.error():
                break
        consumer.close()
        assert message is not None and message.value() == b"world"

        broker.send_signal(signal.SIGINT)
        assert broker.wait(timeout=60) == 0
        stderr = broker.stderr.read()
        assert "topic hello: created, 2 partition(s)" in stderr and "Kafka stopped" in stderr
        assert not LIBRDKAFKA_LINE.search(stderr), stderr  # issue 54.6, as below
        assert not port_open(port)
        assert (tmp_path / "kafka" / "data" / "meta.properties").exists()  # kept for a restart

        broker = start_broker("--port", str(port), "--data-dir", str(tmp_path / "kafka"), "--topic", "hello:2")
        assert broker.stdout.readline().startswith("export KAFKA_BOOTSTRAP=")
        broker.send_signal(signal.SIGINT)
        assert broker.wait(timeout=60) == 0
        assert "topic hello: exists already, kept as it is" in broker.stderr.read()
    finally:
        if broker.poll() is None:
            broker.kill()


def test_a_port_in_use_is_bad_input():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = start_broker("--port", str(port))
        assert broker.wait(timeout=60) == 2
        assert f"port {port} on 127.0.0.1 is already in use" in broker.stderr.read()


def test_a_topic_without_a_whole_partition_count_is_bad_input():
    broker = start_broker("--topic", "clicks:zero")
    assert broker.wait(timeout=60) == 2
    assert "'clicks:zero': expected NAME or NAME:PARTITIONS" in broker.stderr.read()


def test_a_running_broker_gets_a_new_topic_without_a_restart(kafka, capfd):
    """issue 54.7: the user restarted the broker to add a topic (and so recreated the others)."""
    import uuid

    from ingest.cli import main

    name = f"added-{uuid.uuid4().hex[:8]}"
    assert main(["broker", "--topic", f"{name}:3", "--bootstrap", kafka.bootstrap]) == 0
    assert main(["broker", "--topic", f"{name}:3", "--bootstrap", kafka.bootstrap]) == 0
    err = capfd.readouterr().err
    assert f"topic {name}: created, 3 partition(s)" in err and f"topic {name}: exists already" in err
    topics = AdminClient(kafka.client_config()).list_topics(timeout=10).topics
    assert len(topics[name].partitions) == 3
    assert main(["broker", "--bootstrap", kafka.bootstrap]) == 2  # nothing to create


def test_creating_topics_and_producing_print_no_librdkafka_lines(kafka, tmp_path):
    """issue 54.6: `%6|...|BGQUEUE|rdkafka#producer-2| [thrd:background]: Purging 1 unserved
    events from background queue` on stderr as an admin client that created a topic closed
    (librdkafka's default logger writes to stderr; ingest's clients get a logger that drops
    informational lines). Not every close prints it (without the logger, 0, 4 and 3 of three
    runs of eight topics did), so two commands of ten topics each; then `ingest produce`."""
    import uuid

    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}

    def ingest(*args):
        return subprocess.run([sys.executable, "-m", "ingest", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)

    names = [f"quiet-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    for some in (names[:10], names[10:]):
        created = ingest("broker", "--bootstrap", kafka.bootstrap, *[f"--topic={name}:2" for name in some])
        assert created.returncode == 0 and f"topic {some[-1]}: created" in created.stderr, created.stderr
        assert not LIBRDKAFKA_LINE.search(created.stderr), created.stderr
    (tmp_path / "two.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    sent = ingest("produce", str(tmp_path / "two.jsonl"), "--topic", names[0], "--bootstrap", kafka.bootstrap)
    assert sent.returncode == 0, sent.stderr
    assert not LIBRDKAFKA_LINE.search(sent.stdout + sent.stderr), sent.stderr
