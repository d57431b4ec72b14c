"""`ingest replay` after a change to the transform: its own checkpoint and txn ids, idempotent by uid."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ingest.audit.verify import verify
from ingest.run.replay import replay, resolve_range
from ingest.spec.model import Transform
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
