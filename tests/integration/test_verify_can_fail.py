"""`verify` must fail where data was lost or changed (issue 20.4): each case tampers
with what a real run left, or fails it, and `ingest verify` must exit 1; a clean run
with aborted transactions in the topic must exit 0."""

from __future__ import annotations

import shutil
from dataclasses import replace

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from ingest.audit.verify import verify
from ingest.batch.commit import ledger
from ingest.cli import main
from ingest.kafka import checkpoint as spark_checkpoint
from ingest.kafka.checkpoint import read_state
from ingest.spec.document import to_document, to_yaml
from ingest.stream import recovery
from tests.integration.conftest import run_once, with_target


def order(i, amount=1.0, version=1):
    return {"order_id": f"o{i}", "customer": str(i), "amount": amount, "ts": "2026-11-01T10:00:00",
            "version": version}


def send(sender, *items):
    for uid, payload, partition in items:
        sender.send(payload, uid=uid, partition=partition)
    sender.flush()


def verify_exits(code, pipeline, tmp_path, capsys) -> str:
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    capsys.readouterr()
    assert main(["verify", str(file)]) == code, capsys.readouterr().out
    return capsys.readouterr().out


def latest(pipeline):
    return replace(pipeline, source=replace(pipeline.source, kafka=replace(
        pipeline.source.kafka, starting_offsets="latest")))


def test_a_clean_run_with_aborted_transactions_exits_0(spark, sender, pipeline, tmp_path, capsys):
    send(sender, ("u-1", order(1), 0), ("bad", b"{oops", 1))
    sender.transaction([(order(2), "u-2")], commit=True, partition=0)
    sender.transaction([(order(3), "aborted-1")], commit=False, partition=0)
    sender.transaction([(order(4), "aborted-2")], commit=False, partition=1)
    run_once(spark, pipeline, timeout=1200)
    # the checkpoint's end counts the markers and aborted records: past the last record + 1
    assert read_state(spark, pipeline.checkpoint).committed_offsets[sender.topic] == {0: 5, 1: 3}
    report = verify(spark, pipeline)
    assert report.ok and report.findings == (), report
    assert (report.topic_records, report.target_rows, report.dead_letters) == (3, 2, 1)
    assert "OK" in verify_exits(0, pipeline, tmp_path, capsys)


def test_a_missing_target_is_a_finding(spark, sender, pipeline, tmp_path, capsys):
    send(sender, ("u-1", order(1), 0), ("bad", b"{oops", 1))
    run_once(spark, pipeline, timeout=1200)
    shutil.rmtree(pipeline.target.path)  # dropped
    report = verify(spark, pipeline)
    assert not report.ok
    assert any("does not exist" in f for f in report.findings), report.findings
    assert report.missing == 1  # u-1, audited as the checkpoint says it was consumed
    assert "finding: the target" in verify_exits(1, pipeline, tmp_path, capsys)


def test_a_loss_before_a_latest_recovery_point_is_found(spark, sender, pipeline, tmp_path, capsys):
    send(sender, ("before", order(0), 0))
    pipeline = latest(pipeline)
    run_once(spark, pipeline, timeout=1200)  # the first start: at the end of the topic
    send(sender, ("u-1", order(1), 0), ("u-2", order(2), 1))
    run_once(spark, pipeline, timeout=1200)
    shutil.rmtree(pipeline.checkpoint)  # lost: the next run resumes from the target's ledger, a new app id
    DeltaTable.forPath(spark, pipeline.target.path).delete("_uid = 'u-1'")  # a loss before that point
    send(sender, ("u-3", order(3), 0))
    plan = recovery.plan_start(spark, pipeline, recovery.fetch_watermarks(pipeline))
    run_once(spark, pipeline, timeout=1200, starting_offsets=plan.starting_offsets)
    report = verify(spark, pipeline)
    assert (report.before_start, report.missing) == (1, 1), report
    assert report.missing_examples[0].uid == "u-1"
    verify_exits(1, pipeline, tmp_path, capsys)


def test_a_good_record_in_the_dead_letters_is_not_accounted(spark, sender, pipeline, tmp_path, capsys):
    send(sender, ("u-1", order(1), 0), ("u-2", order(2), 0), ("bad", b"{oops", 0))
    run_once(spark, pipeline, timeout=1200)
    dead = spark.read.format("delta").load(pipeline.dead_letter.path)
    # the pipeline had dead-lettered u-2 by mistake: its row is missing, a dead letter has its offset
    DeltaTable.forPath(spark, pipeline.target.path).delete("_uid = 'u-2'")
    dead.withColumn("_offset", F.lit(1).cast(dead.schema["_offset"].dataType)) \
        .write.format("delta").mode("append").save(pipeline.dead_letter.path)
    report = verify(spark, pipeline)
    assert not report.ok and report.unaccounted == 1
    assert "a good record (uid u-2) is in the dead letters" in report.unaccounted_examples[0].why
    verify_exits(1, pipeline, tmp_path, capsys)


def test_a_row_with_the_uid_but_other_values_or_coordinates_is_a_finding(spark, sender, pipeline, tmp_path,
                                                                          capsys):
    send(sender, ("u-1", order(1), 0), ("u-2", order(2), 1), ("u-3", order(3), 0))
    run_once(spark, pipeline, timeout=1200)
    table = DeltaTable.forPath(spark, pipeline.target.path)
    table.update("_uid = 'u-1'", {"amount": F.lit(99.0)})
    table.update("_uid = 'u-2'", {"_offset": F.lit(7).cast("long")})  # an offset the topic never had
    table.update("_uid = 'u-3'", {"_offset": F.lit(0).cast("long")})  # u-1's record
    report = verify(spark, pipeline)
    assert report.missing == 0 and not report.ok
    [finding] = report.findings
    assert finding.startswith("3 target row(s) is not at the coordinates"), finding
    assert all(uid in finding for uid in ("u-1", "u-2", "u-3")), finding
    assert "finding: 3 target row(s)" in verify_exits(1, pipeline, tmp_path, capsys)


def test_upsert_must_hold_the_latest_version(spark, sender, pipeline, tmp_path, capsys):
    schema = pipeline.source.schema + ", version INT"
    pipeline = with_target(replace(pipeline, source=replace(pipeline.source, schema=schema)),
                           mode="upsert", order_by="version")
    send(sender, ("u-1", order(1, amount=1.0, version=2), 0), ("u-1", order(1, amount=2.0, version=1), 1))
    run_once(spark, pipeline, timeout=1200)
    assert verify(spark, pipeline).ok
    DeltaTable.forPath(spark, pipeline.target.path).update(
        "_uid = 'u-1'", {"amount": F.lit(2.0), "version": F.lit(1)})  # the older version won
    report = verify(spark, pipeline)
    assert not report.ok and "does not hold the latest version" in report.findings[0], report
    verify_exits(1, pipeline, tmp_path, capsys)


def test_offsets_consumed_beyond_the_targets_ledger_are_a_finding(spark, sender, pipeline, tmp_path, capsys):
    send(sender, ("u-1", order(1), 0), ("bad", b"{oops", 0))
    run_once(spark, pipeline, timeout=1200)
    send(sender, ("u-2", order(2), 0), ("u-3", order(3), 1))
    # batch 1's dead-letter commit landed and its target commit did not (a crash between them)
    query_id = spark_checkpoint.query_id(spark, pipeline.checkpoint)
    txn = ledger.batch_txn(pipeline.name, query_id, 1, {sender.topic: {0: 3, 1: 1}},
                           start_offsets={sender.topic: {0: 2, 1: 0}})
    dead = spark.read.format("delta").load(pipeline.dead_letter.path)
    with ledger.txn_settings(spark, txn):
        dead.limit(0).write.format("delta").mode("append").save(pipeline.dead_letter.path)
    report = verify(spark, pipeline)
    assert not report.ok
    assert any(f.startswith("consumed beyond the target's ledger") for f in report.findings), report.findings
    assert (report.missing, report.not_yet_ingested) == (2, 0)
    assert "finding: consumed beyond" in verify_exits(1, pipeline, tmp_path, capsys)
