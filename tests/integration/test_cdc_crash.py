"""The crash harness's idea on a CDC pipeline: a crash between the Delta commit and the
checkpoint commit, a SIGKILL in the middle of a MERGE, restart, and the table is the one an
uninterrupted run makes."""

from __future__ import annotations

import json
import random

from confluent_kafka import Producer

from ingest.batch.commit import faults
from ingest.spec.loader import load_file
from tests.integration.conftest import crash_at, ingest_run, run_once
from tests.integration.processes import IngestProcess, write_pipeline

KEYS = 12


def produce_changes(kafka, topic, seed: int = 7) -> None:
    """Inserts, updates and deletes of a few keys, some out of order, over both partitions."""
    rng = random.Random(seed)
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for lsn in range(1, 121):
        key = rng.randrange(KEYS)
        op = "d" if rng.random() < 0.2 else rng.choice("cu")
        sequence = lsn - 5 if rng.random() < 0.1 else lsn  # now and then a late change
        image = {"id": key, "name": f"n{key}", "tier": f"t{lsn}"}
        envelope = {"before": image if op == "d" else None, "after": None if op == "d" else image,
                    "op": op, "ts_ms": 1_700_000_000_000 + lsn, "source": {"lsn": sequence}}
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps(envelope).encode(),
                         partition=key % 2)
    for key in (0, 1):  # and two keys end deleted, whatever the draw
        envelope = {"before": {"id": key}, "after": None, "op": "d", "ts_ms": 1_700_000_000_200,
                    "source": {"lsn": 200 + key}}
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps(envelope).encode(),
                         partition=key % 2)
    assert producer.flush(30) == 0


def cdc_pipeline(folder, topic, name):
    return write_pipeline(folder, topic, name=name,
                          source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                            "max_offsets_per_trigger": 25},
                                  "format": "json", "schema": "id BIGINT, name STRING, tier STRING"},
                          uid=None, cdc={"key": ["id"]},
                          target={"path": str(folder / "tables" / name), "deletes": "hard"})


def contents(spark, path):
    rows = spark.read.format("delta").load(path).drop("_ingested_at")
    return sorted(tuple(r) for r in rows.collect())


def test_a_crash_between_the_two_commits_and_a_kill_in_a_merge_change_nothing(spark, kafka, topic, tmp_path, capsys,
                                                                              monkeypatch):
    produce_changes(kafka, topic)
    log = tmp_path / "runs.log"
    crashed = cdc_pipeline(tmp_path, topic, "crashed")
    # Between the two commits of batch 1, raised in this process: the durable state a SIGKILL
    # leaves there (ingest/batch/commit/faults.py; test_crash_harness.py kills a child there).
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    crash_at(spark, load_file(crashed, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline,
             "after_target_commit", batch=1)
    # Only a kill leaves a MERGE's files half written: a child `ingest run`, SIGKILLed in batch 3.
    run = IngestProcess(crashed, kafka.bootstrap, log, fault="during_merge:batch=3:after_ms=200")
    assert run.wait(timeout=900) == -9, f"the kill during the MERGE did not come:\n{run.output()[-3000:]}"
    # the run after the kills: `ingest run` in this process, on the shared session
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, said = ingest_run(crashed, capsys)
    assert code == 0, said[-3000:]
    # the uninterrupted run only has to be right, not killed: in this process, on the shared session
    straight = load_file(cdc_pipeline(tmp_path, topic, "straight"),
                         environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    run_once(spark, straight, timeout=900)

    expected = contents(spark, str(tmp_path / "tables" / "straight"))
    assert 0 < len(expected) < KEYS  # some keys end deleted
    assert contents(spark, str(tmp_path / "tables" / "crashed")) == expected
    assert contents(spark, str(tmp_path / "tables" / "crashed_deletes")) == \
        contents(spark, str(tmp_path / "tables" / "straight_deletes"))
