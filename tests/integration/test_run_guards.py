"""Guards `run` applies at start, not only `validate` (issue 20.7): real broker, Spark, Delta."""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import replace

import pytest
from deltalake import DeltaTable as RustTable

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import Transform, Uid
from ingest.stream.lease import LEASE_FILE
from ingest.stream.recovery import TargetLost, TargetRewritten
from ingest.stream.supervisor import Supervisor
from tests.integration.conftest import run_once
from tests.integration.processes import IngestProcess
from tests.integration.test_faults import send
from tests.integration.test_many_topics import per_topic
from tests.integration.test_many_topics import send as send_to


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


def per_trigger(pipeline, count: int):
    kafka = replace(pipeline.source.kafka, max_offsets_per_trigger=count)
    return replace(pipeline, source=replace(pipeline.source, kafka=kafka))


def test_a_batch_another_copy_committed_with_other_offsets_stops_the_run(spark, kafka, topic, pipeline, tmp_path):
    """Two copies on one checkpoint without the lease, as on an object store: no lease, and no
    exclusive offset log either, so each copy goes on from its own view of the checkpoint. Here
    the second copy's view is the checkpoint as it was while the first ran its batch 1."""
    ten = per_trigger(pipeline, 10)
    send(kafka, topic, [f"a{i}" for i in range(10)])
    run_once(spark, ten, timeout=900)  # batch 0, the copies' common past
    send(kafka, topic, [f"b{i}" for i in range(20)])  # offsets 10-29
    view = tmp_path / "second-copy-view"
    second_file = tmp_path / "second.yaml"
    second_file.write_text(to_yaml(to_document(replace(per_trigger(pipeline, 4), checkpoint=str(view)))))
    second_runs = []

    def second_copy_runs_now(report, _progress):
        # after the first copy's MERGE of batch 1 [10, 20), before its checkpoint commits it
        if report.batch_id != 1 or second_runs:
            return
        shutil.copytree(pipeline.checkpoint, view, ignore=shutil.ignore_patterns(LEASE_FILE))
        # it replays batch 1 (the same range), commits batch 2 as [20, 24), then crashes in batch 3
        second = IngestProcess(second_file, kafka.bootstrap, tmp_path / "second.log",
                               fault="before_dead_letter:batch=3")
        second_runs.append(second.wait(timeout=900))

    first = Supervisor([ten], once=True, on_report=second_copy_runs_now, on_note=lambda text: None)
    first.claim()
    first.start(spark)
    [outcome] = first.wait()
    assert second_runs == [-9], (tmp_path / "second.log").read_text()[-3000:]
    assert outcome.error and outcome.batch_id == 2, outcome.error  # the first copy's batch 2 [20, 30)
    assert "batch 2 was committed" in outcome.error and "by another copy" in outcome.error
    assert f"{topic}/0:20-24" in outcome.error and f"{topic}/0:20-30" in outcome.error

    # the message's way out: one copy, a new checkpoint, resumed from the offsets the table records
    shutil.rmtree(pipeline.checkpoint)
    [outcome] = supervised(spark, ten)
    assert outcome.error is None, outcome.error
    uids = RustTable(pipeline.target.path).to_pyarrow_table(columns=["_uid"]).column("_uid").to_pylist()
    assert sorted(uids) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(20)])


def test_a_table_per_topic_gets_the_start_guards_table_by_table(spark, kafka, pipeline, tmp_path):
    from delta.tables import DeltaTable

    from ingest.kafka.local_broker import create_topic

    prefix = f"guard{uuid.uuid4().hex[:6]}"
    orders, refunds = f"{prefix}.orders", f"{prefix}.refunds"
    for name in (orders, refunds):
        create_topic(kafka.client_config(), name)
        send_to(kafka, name, [f"{name}-a{i}" for i in range(3)])
    shop = per_topic(pipeline, kafka, tmp_path, prefix)
    orders_table, refunds_table = (str(tmp_path / "tables" / t.replace(".", "_")) for t in (orders, refunds))
    assert supervised(spark, shop)[0].error is None  # batch 0, a commit in each table
    first = DeltaTable.forPath(spark, orders_table).history(1).collect()[0].version
    for name in (orders, refunds):
        send_to(kafka, name, [f"{name}-b{i}" for i in range(3)])
    assert supervised(spark, shop)[0].error is None  # batch 1

    shutil.rmtree(refunds_table)  # dropped under the pipeline
    with pytest.raises(TargetRewritten) as stopped:
        supervised(spark, shop)
    assert f"the target {refunds_table} does not exist" in str(stopped.value)

    DeltaTable.forPath(spark, orders_table).restoreToVersion(first)  # undoes batch 1 in one table
    with pytest.raises(TargetRewritten) as stopped:
        supervised(spark, shop)
    assert f"the target {orders_table} no longer matches" in str(stopped.value)
    assert "batch 1 of app id" in str(stopped.value) and "@" in str(stopped.value)


def supervised(spark, pipeline):
    run = supervisor(pipeline)
    run.claim()
    run.start(spark)  # a guard that stops it gives the lease back
    return run.wait()
