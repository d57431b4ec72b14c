"""What a soak drives: records at a steady rate, the pipeline they go through, and `ingest run`
as a process of its own, killed and started again as a scheduler would."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import yaml

from bench import REPO
from bench.soak import memory
from bench.soak.analysis import Batch, parse_batch_line

PIPELINE = "soak"
# the producer's connection errors while the broker restarts are expected: dropped
QUIET = logging.getLogger("bench.soak.producer")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
PARTITIONS = 2


def write_pipeline(folder: Path, topic: str, trigger: str, optimize_every: int) -> Path:
    """An always-on pipeline as a service runs it (deploy/pipelines/orders.yaml's kind): upserts
    on a header uid, a batch every `trigger`, compaction beside the batches."""
    document = {
        "name": PIPELINE,
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                             "starting_offsets": "earliest"},
                   "format": "json",
                   "schema": "order_id STRING NOT NULL, customer STRING, amount DOUBLE, ts TIMESTAMP"},
        "uid": {"header": "message-id"},
        "target": {"path": str(folder / "tables" / PIPELINE)},
        "checkpoint": str(folder / "checkpoints" / PIPELINE),
        "dead_letter": {"path": str(folder / "dead_letter" / PIPELINE)},
        "trigger": {"processing_time": trigger},
        "maintenance": {"optimize_every": optimize_every},
    }
    path = folder / f"{PIPELINE}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def conf_with_heap(folder: Path, driver_memory: str) -> dict[str, str]:
    """The environment that gives the run's JVM `driver_memory` of heap: a conf folder whose
    local.yaml says so (docs/configuration.md), as an operator's conf/<env>.yaml would."""
    conf = folder / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "local.yaml").write_text(yaml.safe_dump({"session": {"driver_memory": driver_memory}}))
    return {"INGEST_CONF_DIR": str(conf)}


class SteadyProducer:
    """`rate` records a second from a thread of its own, idempotent and acks=all; keeps the uid of
    every record the broker acknowledged. Its retries outlast a broker restart."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        from confluent_kafka import Producer

        from ingest.kafka.produce import Uuid7

        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 50, "message.timeout.ms": 600_000,
                                  "logger": QUIET})
        self.uid = Uuid7()
        self.delivered: set[str] = set()
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        left = self.producer.flush(600)
        if left:
            self.failed.append(f"{left} record(s) still unacknowledged after 600 s")

    def _loop(self) -> None:
        began = time.monotonic()
        while not self._stop.wait(0.05):
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                self._send()
            self.producer.poll(0)

    def _send(self) -> None:
        uid = self.uid()
        value = json.dumps({"order_id": uid, "customer": f"c{self.sent % 997}", "amount": self.sent % 1000 / 10,
                            "ts": datetime.now(timezone.utc).isoformat()}).encode()

        def acknowledged(error, _message, uid=uid):
            if error is None:
                self.delivered.add(uid)
            else:
                self.failed.append(f"{uid}: {error}")

        while True:
            try:
                self.producer.produce(self.topic, value, partition=self.sent % PARTITIONS,
                                      headers=[("message-id", uid)], on_delivery=acknowledged)
                break
            except BufferError:  # the broker is away and the queue is full: wait for it
                self.producer.poll(0.5)
        self.sent += 1


class RunProcess:
    """`ingest run` in a session of its own, its output in `log`; each batch line is handed to
    `on_batch` as it is read."""

    def __init__(self, pipeline_file: Path, bootstrap: str, log: Path, on_batch: Callable[[Batch], None],
                 clock: Callable[[], float], *, once: bool = False, native_memory: bool = True,
                 extra_env: dict[str, str] | None = None):
        env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        if native_memory:
            env["JDK_JAVA_OPTIONS"] = memory.NATIVE_MEMORY_TRACKING
        command = [sys.executable, "-m", "ingest", "run", str(pipeline_file), *(["--once"] if once else [])]
        self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        self.pid = self.process.pid
        self._reader = threading.Thread(target=self._read, args=(log, on_batch, clock), daemon=True)
        self._reader.start()

    def _read(self, log: Path, on_batch, clock) -> None:
        assert self.process.stdout is not None
        with open(log, "a") as out:
            for raw in self.process.stdout:
                line = raw.decode(errors="replace")
                out.write(line)
                out.flush()
                if (batch := parse_batch_line(line, clock())) is not None:
                    on_batch(batch)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the run and everything under it at once (its JVM too), as a lost machine would."""
        for process in reversed(memory.tree(self.pid)):
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait(60)

    def stop(self, timeout: float = 300) -> int:
        """SIGTERM to ingest alone (what systemd sends it): it stops its query and exits 0."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.wait(timeout=60)
        self._reader.join(timeout=30)
        return code
