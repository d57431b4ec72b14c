"""Guards `run` applies at start, not only `validate` (issue 20.7): real broker, Spark, Delta."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest

from ingest.errors import SpecErrors
from ingest.run.recovery import TargetLost
from ingest.run.supervisor import Supervisor
from ingest.spec.model import Transform, Uid
from tests.integration.conftest import run_once


def order(i, items=()):
    return {"order_id": f"o{i}", "customer": str(i), "amount": 1.0, "ts": "2026-11-01T10:00:00",
            "items": list(items)}


def supervisor(pipeline, reports=None):
    return Supervisor([pipeline], once=True, on_report=lambda r, _: (reports or []).append(r),
                      on_note=lambda text: None)


def test_run_refuses_a_transform_that_changes_the_number_of_rows(spark, sender, pipeline):
    sender.send(order(1, ["a", "b"]), uid="u-1")
    sender.send(order(2), uid="u-2")  # no items: explode would drop it, uncounted
    sender.flush()
    pipeline = replace(pipeline, source=replace(
        pipeline.source, schema=pipeline.source.schema + ", items ARRAY<STRING>"),
        transform=Transform(select=("order_id", "explode(items) AS item")))
    run = supervisor(pipeline)
    run.claim()
    with pytest.raises(SpecErrors) as raised:
        run.start(spark)
    assert "transform.select[1]" in str(raised.value) and "changes the number of rows" in str(raised.value)
    assert not os.path.exists(pipeline.target.path)
    assert run.running[0].query is None  # nothing started, and the lease is given back
    assert not run.running[0].lease.path.exists()


def test_run_refuses_a_uid_from_uuid(spark, sender, pipeline):
    pipeline = replace(pipeline, transform=Transform(select=("*", "uuid() AS id")), uid=Uid(field="id"))
    run = supervisor(pipeline)
    run.claim()
    with pytest.raises(SpecErrors) as raised:
        run.start(spark)
    assert "'id' comes from uuid()" in str(raised.value)


def test_a_target_lost_under_a_live_checkpoint_stops_the_run(spark, sender, pipeline):
    sender.send(order(1), uid="u-1")
    sender.flush()
    run_once(spark, pipeline, timeout=900)  # the shared test machine can be very slow
    shutil.rmtree(pipeline.target.path)  # dropped under the pipeline
    sender.send(order(2), uid="u-2")
    sender.flush()
    run = supervisor(pipeline)
    run.claim()
    with pytest.raises(TargetLost) as raised:
        run.start(spark)
    message = str(raised.value)
    assert "has committed batches up to 0" in message and pipeline.target.path in message
    assert "does not exist" in message
    from delta.tables import DeltaTable
    assert not DeltaTable.isDeltaTable(spark, pipeline.target.path), "an empty table was created"
