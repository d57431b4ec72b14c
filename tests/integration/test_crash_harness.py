"""Crash `ingest run` at every fault point and at random moments while a producer
keeps writing; at the end every committed uid is in the target exactly once and
every bad record is in the dead letters exactly once.

INGEST_CRASH_SEED=N replays a run; INGEST_SOAK=1 runs many more cycles.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import uuid

from confluent_kafka import Producer

from ingest.batch.faults import BATCH_POINTS
from tests.integration.processes import IngestProcess, write_pipeline

FAULT_ROUNDS = 2  # every fault point, twice
RANDOM_KILLS = 4


class Workload:
    """Orders with producer retries (same uid, new offset), aborted and committed
    transactions, malformed JSON and records without a uid."""

    def __init__(self, kafka, topic: str, rng: random.Random):
        self.kafka, self.topic, self.rng = kafka, topic, rng
        self.producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
        self.committed: set[str] = set()
        self.aborted: set[str] = set()
        self.bad_sent = 0
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _order(self) -> tuple[str, bytes]:
        self._count += 1
        uid = f"{self._count:09d}-{uuid.uuid4().hex[:6]}"
        body = {"order_id": f"o{self._count}", "amount": self.rng.random() * 100,
                "ts": "2026-11-01T10:00:00"}
        return uid, json.dumps(body).encode()

    def send_some(self, count: int) -> None:
        for _ in range(count):
            uid, value = self._order()
            partition = self.rng.randrange(2)
            self.producer.produce(self.topic, value, partition=partition, headers=[("message-id", uid)])
            self.committed.add(uid)
            roll = self.rng.random()
            if roll < 0.05:  # a retry that reached the broker twice
                self.producer.produce(self.topic, value, partition=self.rng.randrange(2),
                                      headers=[("message-id", uid)])
            elif roll < 0.07:
                self.producer.produce(self.topic, b'{"order_id": oops', partition=partition,
                                      headers=[("message-id", f"bad-{uid}")])
                self.bad_sent += 1
            elif roll < 0.08:
                self.producer.produce(self.topic, value, partition=partition)  # no uid
                self.bad_sent += 1
        assert self.producer.flush(30) == 0

    def transaction(self, commit: bool, size: int = 5) -> None:
        txn = Producer({**self.kafka.client_config(), "transactional.id": f"crash-{uuid.uuid4().hex}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        uids = []
        for _ in range(size):
            uid, value = self._order()
            txn.produce(self.topic, value, partition=self.rng.randrange(2), headers=[("message-id", uid)])
            uids.append(uid)
        if commit:
            txn.commit_transaction(30)
            self.committed.update(uids)
        else:
            txn.abort_transaction(30)
            self.aborted.update(uids)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):  # ~10 records/s: a few batches behind at each restart
            self.send_some(2)
            if self.rng.random() < 0.05:
                self.transaction(commit=self.rng.random() < 0.5)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def plan_kills(rng: random.Random) -> list[str | float]:
    """Fault point names, and seconds after start for random SIGKILLs, shuffled."""
    rounds = FAULT_ROUNDS * (5 if os.environ.get("INGEST_SOAK") else 1)
    kills = list(BATCH_POINTS) * rounds + [rng.uniform(4, 25) for _ in range(RANDOM_KILLS * (rounds // FAULT_ROUNDS))]
    rng.shuffle(kills)
    return kills


def crash_once(pipeline_file, kafka, log, kill) -> str:
    if isinstance(kill, str):
        process = IngestProcess(pipeline_file, kafka.bootstrap, log, fault=kill)
        code = process.wait(timeout=900)  # generous: a loaded 2-core machine is slow
        assert code == -9, f"fault {kill} did not kill the run (exit {code}):\n{process.output()[-3000:]}"
        return kill
    process = IngestProcess(pipeline_file, kafka.bootstrap, log)
    try:
        process.process.wait(timeout=kill)
    except subprocess.TimeoutExpired:
        pass
    process.kill()
    return f"SIGKILL at {kill:.1f}s"


def test_exactly_once_through_crashes(spark, kafka, topic, tmp_path, capsys):
    seed = int(os.environ.get("INGEST_CRASH_SEED", random.randrange(1_000_000)))
    with capsys.disabled():  # shown in every run: a failure elsewhere may need the seed
        print(f"\ncrash harness seed {seed} (INGEST_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    pipeline_file = write_pipeline(tmp_path, topic)
    log = tmp_path / "runs.log"
    workload = Workload(kafka, topic, rng)
    workload.send_some(300)
    workload.transaction(commit=False)
    workload.start()
    kills = []
    try:
        for kill in plan_kills(rng):
            kills.append(crash_once(pipeline_file, kafka, log, kill))
    finally:
        workload.stop()

    final = IngestProcess(pipeline_file, kafka.bootstrap, log)
    assert final.wait(timeout=600) == 0, final.output()[-3000:]

    target = spark.read.format("delta").load(str(tmp_path / "tables" / "crashy"))
    uids = [r._uid for r in target.select("_uid").collect()]
    dead = spark.read.format("delta").load(str(tmp_path / "dead_letter" / "crashy"))
    coordinates = [(r._partition, r._offset) for r in dead.select("_partition", "_offset").collect()]
    summary = (f"seed {seed}: {len(kills)} kills ({', '.join(kills)}); produced {len(workload.committed)} "
               f"committed uids, {len(workload.aborted)} aborted, {workload.bad_sent} bad; target "
               f"{len(uids)} rows, dead letters {len(coordinates)}")
    with capsys.disabled():
        print(f"crash harness: {summary}")
    assert len(uids) == len(set(uids)), f"duplicate uids in the target; {summary}"
    assert set(uids) == workload.committed, (
        f"missing {len(workload.committed - set(uids))}, unexpected {len(set(uids) - workload.committed)}; "
        f"{summary}")
    assert len(coordinates) == len(set(coordinates)) == workload.bad_sent, summary
    assert len(kills) >= 12
