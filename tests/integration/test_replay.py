"""`ingest replay` after a change to the transform: its own checkpoint and txn ids, idempotent by uid."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ingest.audit.verify import verify
from ingest.spec.model import Transform
from ingest.stream.replay import replay, resolve_range
from tests.integration.conftest import run_once, table


def files_under(folder: str) -> dict[str, bytes]:
    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_replay_after_a_transform_change_adds_what_it_now_lets_through(spark, sender, pipeline):
    strict = replace(pipeline, transform=Transform(where="amount > 0"))
    for i in range(12):
        sender.send({"order_id": f"o{i}", "amount": -1.0 if i % 4 == 0 else 2.0, "ts": "2026-11-23T09:00:00"},
                    uid=f"u{i}", partition=i % 2)
    sender.send(b"not json", uid="bad", partition=0)
    sender.flush()
    run_once(spark, strict, timeout=900)
    assert table(spark, pipeline.target.path).count() == 9  # 3 filtered, 1 dead letter
    checkpoint_before = files_under(pipeline.checkpoint)

    relaxed = replace(pipeline, transform=Transform(where="amount > -5"))
    span = resolve_range(spark, relaxed, from_ms=0)
    assert span.records == 13
    reports = replay(spark, relaxed, span)
    assert sum(r.merged.inserted for r in reports) == 3  # the 9 already there are no-ops
    assert sum(r.summary.read for r in reports) == 12  # the dead-lettered record is not replayed
    rows = table(spark, pipeline.target.path)
    assert rows.count() == rows.select("_uid").distinct().count() == 12
    assert table(spark, pipeline.dead_letter.path).count() == 1
    assert files_under(pipeline.checkpoint) == checkpoint_before  # the pipeline's checkpoint is untouched
    assert replay(spark, relaxed, span) == []  # its own checkpoint says it is done
    assert verify(spark, relaxed).ok


def test_replay_stops_at_the_targets_ledger_and_takes_only_its_own_dead_letters(
        spark, sender, pipeline, monkeypatch):
    """A crash between the dead-letter commit and the target's leaves the dead-letter ledger a
    batch ahead: replay must end where the target's ledger does (the pipeline has not finished
    that batch). Another pipeline's dead letter at an offset of this topic is not this one's."""
    from ingest.batch.commit import faults
    from ingest.stream.query import start_query

    for i in range(4):
        sender.send({"order_id": f"o{i}", "amount": 1.0, "ts": "2026-11-23T09:00:00"}, uid=f"u{i}")
    sender.flush()
    run_once(spark, pipeline, timeout=900)  # offsets 0-3 in the target's ledger
    sender.send(b"not json", uid="bad")
    sender.send({"order_id": "o5", "amount": 1.0, "ts": "2026-11-23T09:00:00"}, uid="u5")
    sender.flush()
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    query, _ = start_query(spark, pipeline, once=True)
    try:
        with faults.raising("after_dead_letter"):
            query.awaitTermination(600)
    except Exception as error:  # the run stops there, as a crash would
        assert "InjectedFault" in str(error), error
    finally:
        query.stop()
    assert table(spark, pipeline.dead_letter.path).count() == 1  # committed, the target's batch not

    span = resolve_range(spark, pipeline, from_ms=0)
    assert span.records == 4, span.describe()  # not the batch the target never committed

    other = table(spark, pipeline.dead_letter.path).selectExpr(
        "_topic", "_partition", "1L AS _offset", "_kafka_timestamp", "key", "value", "headers", "stage",
        "reason", "'another_pipeline' AS pipeline", "batch_id", "_ingested_at", "_topic_id")
    other.write.format("delta").mode("append").save(pipeline.dead_letter.path)
    reports = replay(spark, pipeline, span)
    assert sum(r.summary.read for r in reports) == 4  # offset 1 is another pipeline's dead letter
