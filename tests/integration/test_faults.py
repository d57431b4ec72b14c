"""Checkpoint loss, retention gaps, a second running copy and a broker restart.

`ingest run` runs as cli.main runs it, on this process's session, where what is
tested is what the run does; as a real process where it is the process: the copy
the second one meets and then crashes (SIGKILL, its lease left behind), and the
run a SIGTERM stops."""

from __future__ import annotations

import json
import shutil

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ingest.kafka.local_broker import LocalKafka, create_topic
from tests.integration.conftest import ingest_run
from tests.integration.processes import IngestProcess, wait_for, write_pipeline


def send(kafka, topic, uids, partition=0, value=None):
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for uid in uids:
        body = value or json.dumps({"order_id": uid, "amount": 1.0, "ts": "2026-11-01T10:00:00"}).encode()
        producer.produce(topic, body, partition=partition, headers=[("message-id", uid)])
    assert producer.flush(30) == 0


def target_uids(spark, folder, name="crashy"):
    return [r._uid for r in spark.read.format("delta").load(str(folder / "tables" / name)).collect()]


def dead_letter_count(spark, folder, name="crashy"):
    return spark.read.format("delta").load(str(folder / "dead_letter" / name)).count()


def run_to_end(pipeline_file, capsys) -> str:
    code, said = ingest_run(pipeline_file, capsys)
    assert code == 0, said[-3000:]
    return said


@pytest.fixture
def bootstrap(kafka, monkeypatch):
    """The pipeline files' ${KAFKA_BOOTSTRAP}, for the runs in this process."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)


def test_lost_checkpoint_resumes_from_the_delta_log(spark, kafka, bootstrap, topic, tmp_path, capsys):
    pipeline_file = write_pipeline(tmp_path, topic)
    send(kafka, topic, [f"a{i}" for i in range(50)])
    send(kafka, topic, ["bad"], value=b"not json")
    run_to_end(pipeline_file, capsys)

    shutil.rmtree(tmp_path / "checkpoints")
    send(kafka, topic, [f"b{i}" for i in range(30)] + [f"a{i}" for i in range(10)], partition=1)
    output = run_to_end(pipeline_file, capsys)

    assert "resuming from the offsets recorded in the Delta log of" in output
    uids = target_uids(spark, tmp_path)
    assert len(uids) == len(set(uids)) == 80
    # read from the start again, the bad record would be dead-lettered a second time
    assert dead_letter_count(spark, tmp_path) == 1


def test_a_run_killed_while_spark_wrote_its_first_offsets_starts_again(spark, kafka, bootstrap, topic, tmp_path,
                                                                       capsys):
    """What a SIGKILL leaves while Spark writes `offsets/0`: the query's metadata, and the
    offsets file still under its temporary name (CheckpointFileManager writes
    `.<name>.<uuid>.tmp` and renames it when complete; a local file system adds the
    checksum). Spark 4.1 and later refuse to start a new query beside them, on every restart."""
    pipeline_file = write_pipeline(tmp_path, topic)
    send(kafka, topic, [f"a{i}" for i in range(20)])
    checkpoint = tmp_path / "checkpoints" / "crashy"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"5a7c0e64-3c1b-4b8e-9a55-0f0c1d2e3f40"}\n')
    temp = ".0.0d9b5e7a-6f43-4c3e-8d62-2b1f5c9e7a10.tmp"
    (checkpoint / "offsets" / temp).write_text('v1\n{"batchWatermarkMs":0,"batchTimes')
    (checkpoint / "offsets" / f".{temp}.crc").write_bytes(b"crc\x00\x00\x02\x00")

    output = run_to_end(pipeline_file, capsys)

    assert f"only what an interrupted first batch left ({temp}); removed" in output
    assert sorted(target_uids(spark, tmp_path)) == sorted(f"a{i}" for i in range(20))
    assert sorted(f.name for f in (checkpoint / "offsets").iterdir()) == [".0.crc", "0"]  # the checksum too


def test_records_lost_to_retention_stop_the_run(spark, kafka, bootstrap, topic, tmp_path, capsys):
    pipeline_file = write_pipeline(tmp_path, topic)
    send(kafka, topic, [f"a{i}" for i in range(20)])
    run_to_end(pipeline_file, capsys)
    send(kafka, topic, [f"b{i}" for i in range(20)])
    admin = AdminClient(kafka.client_config())
    deleted = admin.delete_records([TopicPartition(topic, 0, 30)])
    for future in deleted.values():
        future.result(timeout=30)

    code, said = ingest_run(pipeline_file, capsys)
    assert code == 1
    assert f"{topic}/0: offsets 20-29 (10 records) were deleted by retention" in said
    assert len(target_uids(spark, tmp_path)) == 20

    allowing = write_pipeline(tmp_path, topic, source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic], "allow_data_loss": True},
        "format": "json", "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"})
    output = run_to_end(allowing, capsys)
    assert "skipping records lost to retention" in output
    assert sorted(target_uids(spark, tmp_path)) == sorted([f"a{i}" for i in range(20)] +
                                                          [f"b{i}" for i in range(10, 20)])


def test_a_second_copy_fails_fast_and_a_crashed_one_does_not_block(spark, kafka, bootstrap, topic, tmp_path,
                                                                    capsys):
    pipeline_file = write_pipeline(tmp_path, topic, trigger={"processing_time": "1 second"})
    send(kafka, topic, [f"a{i}" for i in range(20)])
    first = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "first.log", once=False)
    try:
        # the table's first commit, not its _delta_log folder: the second copy here fails in a
        # second, and a kill before that commit leaves a folder no run creates the table in
        first_commit = tmp_path / "tables" / "crashy" / "_delta_log" / f"{0:020}.json"
        wait_for(first_commit.exists, 180, "the first commit", lambda: first.output()[-2000:])
        code, said = ingest_run(pipeline_file, capsys)  # the second copy: this process
        assert code == 1
        assert "already running (host" in said
        assert f"pid {first.process.pid}" in said
    finally:
        first.kill()  # a crash: its lease stays behind, naming a dead process

    send(kafka, topic, [f"b{i}" for i in range(20)])
    run_to_end(pipeline_file, capsys)
    uids = target_uids(spark, tmp_path)
    assert len(uids) == len(set(uids)) == 40


@pytest.fixture
def own_broker(tmp_path):
    broker = LocalKafka(work_dir=tmp_path / "broker")
    broker.start()
    yield broker
    broker.close()


def test_broker_restart_mid_run(spark, own_broker, tmp_path, monkeypatch, capsys):
    topic = "restarts"
    create_topic(own_broker.client_config(), topic, partitions=2)
    pipeline_file = write_pipeline(tmp_path, topic, trigger={"processing_time": "1 second"})
    send(own_broker, topic, [f"a{i}" for i in range(50)])
    run = IngestProcess(pipeline_file, own_broker.bootstrap, tmp_path / "run.log", once=False)
    try:
        wait_for(lambda: (tmp_path / "tables" / "crashy" / "_delta_log").is_dir(), 180, "the first commit")
        own_broker.stop()
        own_broker.start()
        send(own_broker, topic, [f"b{i}" for i in range(50)], partition=1)
        send(own_broker, topic, [f"a{i}" for i in range(10)], partition=1)  # retries after the restart
        rode_it_out = _wait_or_fail(run, lambda: len(target_uids(spark, tmp_path)) >= 100)
    finally:
        run.terminate()
        code = run.wait(timeout=120)
    if rode_it_out:
        assert code == 0, run.output()[-3000:]
    else:  # it may fail instead, but then with a clear error, and a restart completes the work
        assert code == 1 and "error: pipeline crashy failed" in run.output(), run.output()[-3000:]
        monkeypatch.setenv("KAFKA_BOOTSTRAP", own_broker.bootstrap)
        run_to_end(pipeline_file, capsys)
    uids = target_uids(spark, tmp_path)
    assert len(uids) == len(set(uids)) == 100


def _wait_or_fail(run: IngestProcess, done, timeout: float = 240) -> bool:
    """True once `done()`, False if the run exits first."""
    return wait_for(lambda: "exited" if run.process.poll() is not None else done(), timeout,
                    "all records after the broker restart") is True
