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

from ingest.batch.commit import faults
from ingest.batch.commit.faults import BATCH_POINTS
from tests.integration.conftest import crash_at, ingest_run
from tests.integration.processes import IngestProcess, write_pipeline

# Every fault point once and two kills at random moments: each is a JVM start (about 20 s).
# The in-process matrix (test_matrix.py) crashes every pipeline kind at the points again.
FAULT_ROUNDS = 1
RANDOM_KILLS = 2


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


def plan_kills(rng: random.Random, random_kills: int = RANDOM_KILLS) -> list[str | float]:
    """Fault point names, and seconds after start for random SIGKILLs, shuffled."""
    rounds = FAULT_ROUNDS * (5 if os.environ.get("INGEST_SOAK") else 1)
    kills = list(BATCH_POINTS) * rounds + [rng.uniform(4, 25) for _ in range(random_kills * (rounds // FAULT_ROUNDS))]
    rng.shuffle(kills)
    return kills


def crash_once(pipeline_file, kafka, log, kill, extra_env: dict | None = None) -> str:
    if isinstance(kill, str):
        process = IngestProcess(pipeline_file, kafka.bootstrap, log, fault=kill, extra_env=extra_env)
        code = process.wait(timeout=900)  # generous: a loaded 2-core machine is slow
        assert code == -9, f"fault {kill} did not kill the run (exit {code}):\n{process.output()[-3000:]}"
        return kill
    process = IngestProcess(pipeline_file, kafka.bootstrap, log, extra_env=extra_env)
    try:
        process.process.wait(timeout=kill)
    except subprocess.TimeoutExpired:
        pass
    process.kill()
    return f"SIGKILL at {kill:.1f}s"


def test_exactly_once_through_crashes(spark, kafka, topic, tmp_path, capsys, monkeypatch):
    pipeline_file = write_pipeline(tmp_path, topic)
    crash_and_check(spark, kafka, topic, tmp_path, capsys, monkeypatch, pipeline_file,
                    str(tmp_path / "tables" / "crashy"), str(tmp_path / "dead_letter" / "crashy"))


def test_exactly_once_through_crashes_on_s3(spark, kafka, topic, tmp_path, capsys, monkeypatch, s3, s3_bucket,
                                            s3_root):
    """The same kills with the target, the dead letters and the checkpoint on `s3a://` (the S3
    stand-in): every child `ingest run` reaches it as an operator's spark-submit would, through
    spark-defaults.conf; its commits go through ingest's log store, its lease through the store."""
    tables = {"target": {"path": f"{s3_root}/tables/crashy"}, "checkpoint": f"{s3_root}/checkpoints/crashy",
              "dead_letter": {"path": f"{s3_root}/dead_letter/crashy"}}
    pipeline_file = write_pipeline(tmp_path, topic, **tables)
    conf = s3.spark_defaults(tmp_path / "spark-conf", s3_bucket)
    crash_and_check(spark, kafka, topic, tmp_path, capsys, monkeypatch, pipeline_file,
                    tables["target"]["path"], tables["dead_letter"]["path"], {"SPARK_CONF_DIR": str(conf)},
                    random_kills=1)


def crash_and_check(spark, kafka, topic, tmp_path, capsys, monkeypatch, pipeline_file, target_path: str,
                    dead_letter_path: str, extra_env: dict | None = None, random_kills: int = RANDOM_KILLS):
    seed = int(os.environ.get("INGEST_CRASH_SEED", random.randrange(1_000_000)))
    with capsys.disabled():  # shown in every run: a failure elsewhere may need the seed
        print(f"\ncrash harness seed {seed} (INGEST_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    log = tmp_path / "runs.log"
    workload = Workload(kafka, topic, rng)
    workload.send_some(300)
    workload.transaction(commit=False)
    workload.start()
    kills = []
    try:
        for kill in plan_kills(rng, random_kills):
            try:
                kills.append(crash_once(pipeline_file, kafka, log, kill, extra_env))
            except AssertionError as error:  # the seed printed above does not reach pytest-xdist's output
                raise AssertionError(f"seed {seed}, after {len(kills)} kills ({', '.join(kills)}): {error}") from error
    finally:
        workload.stop()

    # the run after the kills only has to finish the work: `ingest run` in this process, on
    # the shared session (no process boundary to test, so no JVM start to pay)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, said = ingest_run(pipeline_file, capsys)
    assert code == 0, said[-3000:]

    target = spark.read.format("delta").load(target_path)
    uids = [r._uid for r in target.select("_uid").collect()]
    dead = spark.read.format("delta").load(dead_letter_path)
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
    assert len(kills) >= len(BATCH_POINTS) + random_kills


class KeyedWorkload:
    """Versions of a few keys by Kafka key (`v` grows, so each is newer), tombstones,
    re-sends under new offsets and malformed JSON; each record's partition and offset kept."""

    def __init__(self, kafka, topic: str, rng: random.Random):
        self.topic, self.rng = topic, rng
        self.producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
        self.sent: list[tuple[int, int, str, bytes | None]] = []  # partition, offset, key, value
        self._v = 0

    def _produce(self, key: str, value: bytes | None) -> None:
        def delivered(error, message) -> None:
            assert error is None, error
            self.sent.append((message.partition(), message.offset(), key, value))
        self.producer.produce(self.topic, key=key.encode(), value=value, partition=int(key[1:]) % 2,
                              on_delivery=delivered)

    def send_some(self, count: int) -> None:
        for _ in range(count):
            key, roll = f"k{self.rng.randrange(10)}", self.rng.random()
            if roll < 0.15:
                self._produce(key, None)  # a tombstone
            elif roll < 0.2:
                self._produce(key, b'{"name": oops')
            else:
                self._v += 1
                value = json.dumps({"name": f"{key}-{self._v}", "v": self._v}).encode()
                self._produce(key, value)
                if roll > 0.95:  # a retry that reached the broker twice
                    self._produce(key, value)
        assert self.producer.flush(30) == 0

    def end_offset(self, partition: int) -> int:
        return max(offset for p, offset, _, _ in self.sent if p == partition) + 1

    def expected(self, lost: set[tuple[int, int]]) -> tuple[list[tuple], int]:
        """The soft-deleted upsert of every record not lost, in Kafka order per key; and
        how many bad records survived."""
        state: dict[str, tuple] = {}
        bad = 0
        for partition, offset, key, value in sorted(self.sent):
            if (partition, offset) in lost:
                continue
            if value is None:
                name, v, _ = state.get(key, (None, None, True))
                state[key] = (name, v, True)
                continue
            try:
                payload = json.loads(value)
            except ValueError:
                bad += 1
                continue
            state[key] = (payload["name"], payload["v"], False)
        return sorted((key, *values) for key, values in state.items()), bad


def delete_below(kafka, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_config())  # kept: a collected client never completes its futures
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(timeout=60)


def test_a_tombstone_pipeline_is_exact_through_crashes_and_lost_ranges(spark, kafka, topic, tmp_path, capsys,
                                                                        monkeypatch):
    """Tombstones by key and ranges deleted below the consumer (on_data_loss: record) while runs
    are killed at each batch point: every surviving record applied once, each lost range one row."""
    import yaml

    from ingest.audit.verify import verify
    from ingest.spec.loader import load_file

    rng = random.Random(int(os.environ.get("INGEST_CRASH_SEED", "27")))
    pipeline_file = write_pipeline(tmp_path, topic, name="keyed", on_data_loss="record",
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic]},
                                           "format": "json", "schema": "name STRING, v BIGINT"},
                                   target={"mode": "upsert", "order_by": "v", "deletes": "soft"})
    document = yaml.safe_load(pipeline_file.read_text())
    pipeline_file.write_text(yaml.safe_dump({**document, "uid": {"key": True}}, sort_keys=False))
    pipeline = load_file(pipeline_file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    workload = KeyedWorkload(kafka, topic, rng)
    runs = 0

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)

    def run(fault: str | None = None) -> None:
        """A kill during the MERGE is a real SIGKILL of a child `ingest run` (only a kill leaves
        a MERGE's files half written); the other points raise in this process, as test_matrix.py
        crashes them (ingest/batch/commit/faults.py says why the durable state is a kill's, and
        test_exactly_once_through_crashes kills a child at each). A clean run is `ingest run` in
        this process, on the shared session (it has no process boundary to prove)."""
        nonlocal runs
        runs += 1
        if fault and not fault.startswith("during_merge"):
            crash_at(spark, pipeline, fault)
            return
        if fault:
            process = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / f"run-{runs}.log", fault=fault)
            code, output = process.wait(timeout=900), process.output()
        else:
            code, output = ingest_run(pipeline_file, capsys)
        causes = [line for line in output.splitlines()
                  if "Error" in line or "Exception" in line or line.startswith("error")][:15]
        assert code == (-9 if fault else 0), (f"{fault or 'a clean run'}: exit {code}\n" + "\n".join(causes)
                                              + f"\n...\n{output[-1500:]}")

    workload.send_some(40)
    run()
    lost: set[tuple[int, int]] = set()
    gaps = []
    for partition, faults_there in ((0, ("after_dead_letter", "after_target_commit")),
                                    (1, ("before_dead_letter", "during_merge:after_ms=100"))):
        consumed = workload.end_offset(partition)  # a clean run read everything so far
        workload.send_some(30)
        end = workload.end_offset(partition)
        assert end > consumed, "no new record on the partition to lose"
        delete_below(kafka, topic, partition, end)  # what it has not read yet is gone
        lost |= {(partition, offset) for offset in range(consumed, end)}
        gaps.append((partition, consumed, end - consumed))
        for fault in faults_there:  # the gap found again after each kill: still recorded once
            run(fault)
        run()

    expected, bad = workload.expected(lost)
    target = spark.read.format("delta").load(str(tmp_path / "tables" / "keyed"))
    assert sorted(tuple(r) for r in target.select("_uid", "name", "v", "_deleted").collect()) == expected
    dead = spark.read.format("delta").load(str(tmp_path / "dead_letter" / "keyed"))
    found = [(r._partition, r._offset, r.reason) for r in dead.where("stage = 'lost'").collect()]
    assert sorted((p, o) for p, o, _ in found) == [(p, start) for p, start, _ in gaps], found
    for (_, _, reason), (_, start, count) in zip(sorted(found), gaps, strict=True):
        assert reason.startswith(f"offsets {start}-{start + count - 1} ({count} records)"), reason
    decode = [(r._partition, r._offset) for r in dead.where("stage = 'decode'").collect()]
    assert len(decode) == len(set(decode)) == bad
    report = verify(spark, pipeline)
    assert report.ok, report
