"""The target's ledger as the recovery point: double faults (a crash, then a lost
checkpoint), batches that write nothing, skipped batches, rewritten history and a
recreated topic. A crash during the MERGE is a real SIGKILL of `ingest run`; the
other points raise in this process (as test_matrix.py does), and every run starts
as `ingest run` starts it, from the checkpoint or the target's ledger."""

from __future__ import annotations

import shutil

import pytest

from ingest.batch.commit import faults
from ingest.batch.commit.faults import BATCH_POINTS
from ingest.spec.loader import load_file
from tests.integration.conftest import crash_at, run_recovering
from tests.integration.processes import IngestProcess, wait_for, write_pipeline

ORDER = {"order_id": "o", "amount": 1.0, "ts": "2026-11-01T10:00:00"}


def send_batch(sender, good: list[str], bad: list[str] = (), partition: int = 0) -> None:
    for uid in good:
        sender.send({**ORDER, "order_id": uid}, uid=uid, partition=partition)
    for uid in bad:
        sender.send(b'{"order_id": oops', uid=uid, partition=partition)
    sender.flush()


def run(pipeline_file, kafka, log, **kwargs) -> IngestProcess:
    process = IngestProcess(pipeline_file, kafka.bootstrap, log, **kwargs)
    process.wait(timeout=600)
    return process


def target_uids(spark, folder, name="crashy") -> list[str]:
    return [r._uid for r in spark.read.format("delta").load(str(folder / "tables" / name)).collect()]


def dead_letter_coordinates(spark, folder, name="crashy") -> list[tuple]:
    rows = spark.read.format("delta").load(str(folder / "dead_letter" / name)).collect()
    return [(r._topic, r._partition, r._offset) for r in rows]


@pytest.mark.parametrize("point,earlier_batch", [(p, False) for p in BATCH_POINTS] + [("after_dead_letter", True)])
def test_a_crash_then_a_lost_checkpoint_loses_and_duplicates_nothing(spark, kafka, topic, sender, tmp_path,
                                                                     monkeypatch, point, earlier_batch):
    """Issue 13 case 1: the dead letters commit before the target; killed between (or
    around) the two, with the checkpoint then deleted, the next run must complete the
    batch in the target and write no dead letter twice."""
    pipeline_file = write_pipeline(tmp_path, topic)
    pipeline = load_file(pipeline_file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    expected = []
    if earlier_batch:  # the target already has a ledger when the crash comes
        send_batch(sender, [f"a{i}" for i in range(10)], ["bad-a"])
        run_recovering(spark, pipeline)
        expected += [f"a{i}" for i in range(10)]
    send_batch(sender, [f"b{i}" for i in range(20)], ["bad-b1", "bad-b2"])
    send_batch(sender, [f"c{i}" for i in range(5)], ["bad-c"], partition=1)
    expected += [f"b{i}" for i in range(20)] + [f"c{i}" for i in range(5)]

    if point == "during_merge":  # a MERGE's files half written: only a real kill leaves that
        crashed = run(pipeline_file, kafka, tmp_path / "crash.log", fault=point)
        assert crashed.process.returncode == -9, crashed.output()[-3000:]
    else:  # the other points in this process, as test_matrix.py crashes them
        monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
        crash_at(spark, pipeline, point)
    shutil.rmtree(tmp_path / "checkpoints")
    plan, _ = run_recovering(spark, pipeline)
    if earlier_batch or point == "after_target_commit":  # else the target has no ledger: the topic's start
        assert plan.starting_offsets, "the run did not start from the offsets in the target's ledger"

    uids = target_uids(spark, tmp_path)
    assert len(uids) == len(set(uids)), "duplicates in the target"
    assert sorted(uids) == sorted(expected), f"missing {sorted(set(expected) - set(uids))}"
    coordinates = dead_letter_coordinates(spark, tmp_path)
    assert len(coordinates) == len(set(coordinates)) == (4 if earlier_batch else 3)


# --- in the test's own Spark session: the supervisor's start, then the query ------------


def app_id(spark, pipeline) -> str:
    from ingest.batch.commit import ledger
    from ingest.kafka import checkpoint as spark_checkpoint

    return ledger.app_id(pipeline.name, spark_checkpoint.query_id(spark, pipeline.checkpoint))


def ledger_entries(pipeline) -> list[dict]:
    """The target's ledger, oldest first, read with delta-rs (not the code under test)."""
    import json

    from deltalake import DeltaTable

    history = reversed(DeltaTable(pipeline.target.path).history())
    return [json.loads(h["userMetadata"]) for h in history if h.get("userMetadata")]


def uids(spark, pipeline) -> list[str]:
    return [r._uid for r in spark.read.format("delta").load(pipeline.target.path).select("_uid").collect()]


def send(sender, good, bad=(), partition=0):
    send_batch(sender, good, bad, partition)


def test_a_batch_that_writes_nothing_records_its_txn_version_and_offsets(spark, sender, pipeline, topic):
    """Issue 13 case 2, issue 20 point 1: an all-duplicate insert-only batch and a batch of
    only dead letters each leave a target commit with the txn version and the offsets,
    so a lost checkpoint afterwards resumes after them."""
    from deltalake import DeltaTable

    from tests.integration.conftest import run_once

    send(sender, [f"a{i}" for i in range(5)])
    run_once(spark, pipeline)
    send(sender, [f"a{i}" for i in range(5)])  # every uid already in the table
    [duplicates] = run_once(spark, pipeline)
    assert (duplicates.merged.inserted, duplicates.summary.read) == (0, 5)
    send(sender, [], ["bad1", "bad2"], partition=1)  # no good record at all
    run_once(spark, pipeline)

    app = app_id(spark, pipeline)
    assert DeltaTable(pipeline.target.path).transaction_version(app) == 2
    entries = ledger_entries(pipeline)
    assert [e["batch_id"] for e in entries] == [0, 1, 2]
    assert entries[1]["end_offsets"] == {topic: {"0": 10, "1": 0}}  # the idle partition too
    assert entries[2]["end_offsets"] == {topic: {"0": 10, "1": 2}}
    assert entries[2]["start_offsets"] == entries[1]["end_offsets"]

    shutil.rmtree(pipeline.checkpoint)
    send(sender, ["b0", "b1"])
    plan, reports = run_recovering(spark, pipeline)
    assert plan.starting_offsets == {topic: {0: 10, 1: 2}}
    assert sum(r.summary.read for r in reports) == 2  # nothing re-read
    assert sorted(uids(spark, pipeline)) == sorted([f"a{i}" for i in range(5)] + ["b0", "b1"])


def clean_up_log_before(spark, path: str, batch: int) -> None:
    """What Delta's log clean-up leaves once the retention has passed: a checkpoint of the
    current version, and no JSON commit up to the one that holds `batch`'s ledger entry."""
    import os

    from deltalake import DeltaTable as Log

    from ingest.platform.delta import delta_log, latest_snapshot, write_checkpoint
    from ingest.spec.model import Target

    log = delta_log(spark, Target(path=path))
    write_checkpoint(spark, log, latest_snapshot(spark, log))
    history = Log(path).history()
    last = max(h["version"] for h in history if f'"batch_id":{batch},' in (h.get("userMetadata") or ""))
    folder = os.path.join(path, "_delta_log")
    for version in range(last + 1):
        for suffix in (".json", ".crc"):
            name = os.path.join(folder, f"{version:020d}{suffix}")
            if os.path.exists(name):
                os.remove(name)
    assert all('"batch_id":0,' not in (h.get("userMetadata") or "") for h in Log(path).history())


@pytest.mark.parametrize("reset", ["offset_log", "offset_log_after_clean_up", "older_backup_after_clean_up"])
def test_a_reset_offset_log_under_the_same_query_id_stops_the_run(spark, sender, pipeline, reset):
    """Issue 20 point 2: offsets/ and commits/ deleted, metadata kept: Spark numbers new
    ranges with batch ids the table has committed; Delta would skip them silently.
    Issue 57 point 1: the same once Delta's log clean-up has removed the old batches'
    commits from the history (the txn version survives in the checkpoint), and a copy of
    the checkpoint from before batches 1-2 restored: the stop cannot depend on history."""
    from ingest.batch.commit.ledger import ReplayMismatch
    from tests.integration.conftest import run_once

    backup = f"{pipeline.checkpoint}-backup"
    for name in "abc":
        send(sender, [f"{name}{i}" for i in range(3)])
        run_once(spark, pipeline)
        if name == "a":
            shutil.copytree(pipeline.checkpoint, backup)
    if reset.endswith("after_clean_up"):
        clean_up_log_before(spark, pipeline.target.path, 1)
    if reset.startswith("older_backup"):
        shutil.rmtree(pipeline.checkpoint)
        shutil.copytree(backup, pipeline.checkpoint)
    else:
        for folder in ("offsets", "commits"):
            shutil.rmtree(f"{pipeline.checkpoint}/{folder}")
    send(sender, [f"new{i}" for i in range(5)])
    with pytest.raises(ReplayMismatch) as failed:
        run_recovering(spark, pipeline)
    assert "batch 2 was already committed" in str(failed.value)
    assert "Delete the whole checkpoint folder" in str(failed.value)

    shutil.rmtree(pipeline.checkpoint)  # what the message says to do
    run_recovering(spark, pipeline)
    landed = uids(spark, pipeline)
    assert sorted(landed) == sorted(f"{n}{i}" for n in "abc" for i in range(3)) + [f"new{i}" for i in range(5)]


def test_latest_and_a_lost_checkpoint_read_what_an_idle_partition_got(spark, kafka, sender, pipeline, topic):
    """Issue 20 point 3: the ledger records every partition Spark planned, idle or not."""
    from dataclasses import replace

    latest = replace(pipeline, source=replace(pipeline.source, kafka=replace(
        pipeline.source.kafka, starting_offsets="latest")))
    send(sender, ["before-start"])
    run_recovering(spark, latest)  # starts at the end: sources/0/0
    send(sender, [f"a{i}" for i in range(5)], partition=0)
    run_recovering(spark, latest)
    shutil.rmtree(latest.checkpoint)
    send(sender, [f"b{i}" for i in range(5)], partition=1)  # the partition idle until now
    run_recovering(spark, latest)
    assert sorted(uids(spark, latest)) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])

    # Issue 27 point 4: partitions added while stopped, then a lost checkpoint: a live
    # checkpoint would read them from earliest, and so must recovery; their origin is not
    # the recovered checkpoint's start (that would let verify agree with a skip).
    from confluent_kafka.admin import AdminClient, NewPartitions

    from ingest.audit.verify import verify

    admin = AdminClient(kafka.client_config())
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    sender.producer = type(sender.producer)({**kafka.client_config(), "enable.idempotence": True})
    send(sender, ["c2"], partition=2)
    send(sender, ["c3"], partition=3)
    shutil.rmtree(latest.checkpoint)
    plan, _ = run_recovering(spark, latest)
    assert plan.starting_offsets[topic][2] == plan.starting_offsets[topic][3] == -2  # EARLIEST
    assert {"c2", "c3"} <= set(uids(spark, latest))
    assert set(ledger_entries(latest)[-1]["origin"][topic]) == {"0", "1"}
    report = verify(spark, latest)
    assert report.ok, report


def test_a_restored_target_stops_a_run_with_its_checkpoint_and_is_refilled_without(spark, sender, pipeline):
    """Issue 13 case 3: RESTORE undoes committed batches; the checkpoint is ahead of the table."""
    from delta.tables import DeltaTable

    from ingest.stream.recovery import TargetRewritten

    send(sender, [f"a{i}" for i in range(3)])
    run_recovering(spark, pipeline)
    first = DeltaTable.forPath(spark, pipeline.target.path).history(1).collect()[0].version
    send(sender, [f"b{i}" for i in range(3)], ["bad-b"])
    run_recovering(spark, pipeline)
    send(sender, [f"c{i}" for i in range(3)])
    run_recovering(spark, pipeline)
    DeltaTable.forPath(spark, pipeline.target.path).restoreToVersion(first)
    from deltalake import DeltaTable as Log

    assert Log(pipeline.target.path).transaction_version(app_id(spark, pipeline)) == 2  # not rolled back

    with pytest.raises(TargetRewritten) as stopped:
        run_recovering(spark, pipeline)
    assert "batches 1-2" in str(stopped.value) and "delete the checkpoint" in str(stopped.value)

    shutil.rmtree(pipeline.checkpoint)
    plan, reports = run_recovering(spark, pipeline)
    assert sum(r.summary.read for r in reports) == 7  # b and c again, from the restored ledger
    landed = uids(spark, pipeline)
    assert len(landed) == len(set(landed)) == 9
    dead = spark.read.format("delta").load(pipeline.dead_letter.path).count()
    assert dead == 1  # the replay is a no-op in the dead letters


def test_a_restore_followed_by_a_batch_still_stops_the_next_run(spark, sender, pipeline):
    """Issue 57 point 2: a RESTORE while a continuous run goes on, then one more batch: the
    batch committed after the RESTORE is live, and must not hide the one the RESTORE undid
    (Delta never rolls back its txn version: batch 1 can never be written again)."""
    from dataclasses import replace

    from delta.tables import DeltaTable

    from ingest.spec.model import Trigger
    from ingest.stream.query import start_query
    from ingest.stream.recovery import TargetRewritten

    pipeline = replace(pipeline, trigger=Trigger(available_now=False, processing_time="1 second"))
    reports: list = []
    query, processor = start_query(spark, pipeline, on_report=reports.append)
    try:
        send(sender, [f"a{i}" for i in range(3)])
        wait_for(lambda: len(reports) >= 1 or query.exception() is not None, 120, "batch 0")
        first = DeltaTable.forPath(spark, pipeline.target.path).history(1).collect()[0].version
        send(sender, [f"b{i}" for i in range(3)])
        wait_for(lambda: len(reports) >= 2 or query.exception() is not None, 120, "batch 1")
        DeltaTable.forPath(spark, pipeline.target.path).restoreToVersion(first)
        send(sender, [f"c{i}" for i in range(3)])
        wait_for(lambda: len(reports) >= 3 or query.exception() is not None, 120, "batch 2")
    finally:
        query.stop()
        processor.settle()
    assert query.exception() is None, query.exception()
    assert [r.batch_id for r in reports] == [0, 1, 2]
    assert sorted(uids(spark, pipeline)) == sorted([f"a{i}" for i in range(3)] + [f"c{i}" for i in range(3)])

    with pytest.raises(TargetRewritten) as stopped:
        run_recovering(spark, pipeline)
    assert "batch 1 of app id" in str(stopped.value) and "delete the checkpoint" in str(stopped.value)


def test_a_recreated_topic_stops_the_run_and_a_reset_reads_the_new_one(spark, kafka, sender, pipeline, topic):
    """Issue 13 case 6: same name, new topic id, offsets from 0 again."""
    from confluent_kafka.admin import AdminClient

    from ingest.kafka.local_broker import create_topic
    from ingest.stream.recovery import TopicRecreated

    send(sender, [f"a{i}" for i in range(6)], ["bad-old"])  # the bad one at offset 6
    run_recovering(spark, pipeline)
    admin = AdminClient(kafka.client_config())
    admin.delete_topics([topic])[topic].result(timeout=30)

    def recreated() -> bool:  # the deletion completes asynchronously: creating fails until it has
        try:
            create_topic(kafka.client_config(), topic, partitions=2)
            return True
        except Exception:
            return False

    wait_for(recreated, 30, f"topic {topic} to be created again after its deletion")
    sender.producer = type(sender.producer)({**kafka.client_config(), "enable.idempotence": True})
    send(sender, ["n0", "n1"])

    with pytest.raises(TopicRecreated) as stopped:
        run_recovering(spark, pipeline)
    assert "was deleted and created again" in str(stopped.value)
    assert "delete the checkpoint" in str(stopped.value)

    shutil.rmtree(pipeline.checkpoint)
    plan, _ = run_recovering(spark, pipeline)
    assert any("the new one is read from starting_offsets" in note for note in plan.notes)
    assert sorted(uids(spark, pipeline)) == sorted([f"a{i}" for i in range(6)] + ["n0", "n1"])

    # Issue 27 point 2: the new topic past the old one's end (7), then a second lost
    # checkpoint: the old topic's entries must not move the new topic's resume point.
    send(sender, [f"n{i}" for i in range(2, 6)], ["bad-new"])  # the bad one at offset 6 again
    send(sender, [f"n{i}" for i in range(7, 12)])
    shutil.rmtree(pipeline.checkpoint)
    plan, _ = run_recovering(spark, pipeline)
    assert plan.starting_offsets == {topic: {0: 2, 1: 0}}, plan.notes
    new = [f"n{i}" for i in range(12) if i != 6]
    assert sorted(uids(spark, pipeline)) == sorted([f"a{i}" for i in range(6)] + new)
    dead = spark.read.format("delta").load(pipeline.dead_letter.path).collect()
    assert sorted((r._partition, r._offset) for r in dead) == [(0, 6), (0, 6)]  # one per topic
    assert len({r._topic_id for r in dead}) == 2

    # verify audits the new topic against its own ledger entries and dead letters: the old
    # topic's bad record at the same offset is neither a second copy nor this one's account
    from ingest.audit.dispatch import verify_pipeline

    report = verify_pipeline(spark, pipeline)
    assert report.ok, report
    assert (report.dead_letter_duplicates, report.unaccounted, report.dead_letters) == (0, 0, 1), report
