"""Targets, dead letters and checkpoints on `s3a://`, against the S3 stand-in on loopback
(tests/s3_server.py: moto's server under the real hadoop-aws and AWS SDK v2)."""

from __future__ import annotations

from dataclasses import replace

from ingest.spec.model import DeadLetter, Target
from tests.integration.conftest import run_once, table


def on_s3(pipeline, root: str):
    return replace(pipeline, target=replace(pipeline.target, path=f"{root}/tables/orders"),
                   dead_letter=DeadLetter(path=f"{root}/dead_letter/orders"),
                   checkpoint=f"{root}/checkpoints/orders")


def test_a_run_writes_target_dead_letters_and_checkpoint_on_s3_and_verify_is_exact(spark, sender, pipeline, s3_root):
    from ingest.audit.verify import verify

    s3_pipeline = on_s3(pipeline, s3_root)
    for n in range(6):
        sender.send({"order_id": f"o{n}", "amount": n, "ts": "2026-11-01T10:00:00"}, uid=f"u{n}", partition=n % 2)
    sender.send({"order_id": "o0", "amount": 0, "ts": "2026-11-01T10:00:00"}, uid="u0", partition=1)  # a retry
    sender.send(b"{not json", uid="bad-1")
    sender.flush()
    run_once(spark, s3_pipeline)
    assert sorted(r._uid for r in table(spark, s3_pipeline.target.path).select("_uid").collect()) == \
        [f"u{n}" for n in range(6)]
    assert table(spark, s3_pipeline.dead_letter.path).count() == 1
    report = verify(spark, s3_pipeline)
    assert report.ok, report
