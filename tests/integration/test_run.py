"""The exactly-once core against a real broker, Spark and Delta."""

import json

import pytest
from delta.tables import DeltaTable

from tests.integration.conftest import crash_at, run_once, table, with_target


def order(i, amount=1.0, ts="2026-11-01T10:00:00"):
    return {"order_id": f"o{i}", "customer": f"c{i % 3}", "amount": amount, "ts": ts}


@pytest.mark.parametrize("mode", ["insert_only", "upsert"])
def test_producer_retries_land_once(spark, sender, pipeline, mode):
    pipeline = with_target(pipeline, mode=mode, order_by="ts" if mode == "upsert" else None)
    sender.send(order(1), uid="u-1")
    sender.send(order(2), uid="u-2", partition=1)
    sender.send(order(1), uid="u-1")  # a retry: same uid, new offset
    sender.flush()
    run_once(spark, pipeline)
    sender.send(order(1), uid="u-1", partition=1)  # and again, in a later batch
    sender.flush()
    run_once(spark, pipeline)

    rows = table(spark, pipeline.target.path)
    assert sorted(r._uid for r in rows.select("_uid").collect()) == ["u-1", "u-2"]
    first_copy = rows.where("_uid = 'u-1'").select("_partition", "_offset").first()
    if mode == "insert_only":
        assert (first_copy._partition, first_copy._offset) == (0, 0)


def test_the_target_is_made_while_the_query_starts(spark, sender, pipeline, monkeypatch):
    from ingest.batch.commit import faults

    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    sender.send(order(1), uid="u-1")
    sender.flush()
    crash_at(spark, pipeline, "before_dead_letter")  # the first batch stops before it writes anything
    target = DeltaTable.forPath(spark, pipeline.target.path)
    assert [(h.version, h.operation) for h in target.history().collect()] == [(0, "CREATE TABLE")]
    made = target.toDF().schema

    [report] = run_once(spark, pipeline)
    assert report.merged.inserted == 1
    history = target.history().select("version", "operation").collect()
    assert [tuple(h) for h in sorted(history)] == [(0, "CREATE TABLE"), (1, "MERGE")]
    assert target.toDF().schema == made, "the batch's columns differ from those the table was made with"
    assert {"_uid", "order_id", "amount", "_offset"} <= set(made.fieldNames())


def test_aborted_transactions_never_land(spark, sender, pipeline):
    sender.transaction([(order(i), f"c-{i}") for i in range(5)], commit=True)
    sender.transaction([(order(100 + i), f"a-{i}") for i in range(5)], commit=False)
    sender.transaction([(order(200 + i), f"d-{i}") for i in range(5)], commit=True)
    run_once(spark, pipeline)  # control records leave offset gaps: must not trip failOnDataLoss

    uids = sorted(r._uid for r in table(spark, pipeline.target.path).select("_uid").collect())
    assert uids == sorted([f"c-{i}" for i in range(5)] + [f"d-{i}" for i in range(5)])


def test_bad_records_go_to_dead_letters_and_the_query_lives(spark, sender, pipeline):
    sender.send(order(1), uid="good-1")
    sender.send(b"{not json", uid="bad-json")
    sender.send({"order_id": "o2", "amount": "lots"}, uid="wrong-type")
    sender.send({"customer": "c9"}, uid="missing-field")
    sender.send(order(3))  # no uid header
    sender.send(order(4), headers=[("message-id", None)])  # a null uid
    sender.send(order(5), headers=[("traceparent", b"00-4bf92f3577b34da6-00f067aa0ba902b7-01")])  # others only
    sender.flush()
    reports = run_once(spark, pipeline)

    assert [r._uid for r in table(spark, pipeline.target.path).collect()] == ["good-1"]
    dead = table(spark, pipeline.dead_letter.path)
    stages = sorted((r.stage, r._offset) for r in dead.collect())
    assert stages == [("decode", 1), ("decode", 2), ("decode", 3), ("uid", 4), ("uid", 5), ("uid", 6)]
    raw = dead.where("_offset = 1").first()
    assert bytes(raw.value) == b"{not json"
    assert raw.pipeline == "orders" and raw.reason
    assert sum(r.summary.dead_letters for r in reports) == 6


def test_bad_cast_in_transform_is_a_dead_letter(spark, sender, pipeline):
    from ingest.spec.model import Transform

    pipeline = pipeline.__class__(**{**pipeline.__dict__, "transform": Transform(
        select=("*", "CAST(customer AS INT) AS customer_no"), where="amount > 0")})
    sender.send({**order(1), "customer": "17"}, uid="ok")
    sender.send({**order(2), "customer": "seventeen"}, uid="bad-cast")
    sender.send({**order(3, amount=-1.0), "customer": "3"}, uid="filtered")
    sender.flush()
    reports = run_once(spark, pipeline)

    rows = table(spark, pipeline.target.path).collect()
    assert [(r._uid, r.customer_no) for r in rows] == [("ok", 17)]
    dead = table(spark, pipeline.dead_letter.path).collect()
    assert [(r.stage, r._offset) for r in dead] == [("transform", 1)]
    assert "CAST" in dead[0].reason.upper()
    assert reports[0].summary.by_stage["filtered"] == 1


def test_replayed_batch_writes_nothing(spark, sender, pipeline):
    from ingest.batch.processor import BatchProcessor, payload_schema

    sender.send(order(1), uid="u-1")
    sender.send(b"garbage", uid="bad")
    sender.flush()
    run_once(spark, pipeline)
    history_before = DeltaTable.forPath(spark, pipeline.target.path).history().count()
    dead_before = DeltaTable.forPath(spark, pipeline.dead_letter.path).history().count()

    # A restart that lost the checkpoint commit replays batch 0 with the same data.
    raw = (spark.read.format("kafka").option("kafka.bootstrap.servers", pipeline.source.kafka.bootstrap_servers)
           .option("subscribe", pipeline.source.kafka.topics[0]).option("includeHeaders", "true").load())
    BatchProcessor(pipeline, payload_schema(spark, pipeline))(raw, 0)

    target = DeltaTable.forPath(spark, pipeline.target.path)
    assert target.history().count() == history_before
    assert DeltaTable.forPath(spark, pipeline.dead_letter.path).history().count() == dead_before
    assert table(spark, pipeline.target.path).count() == 1
    assert table(spark, pipeline.dead_letter.path).count() == 1
    merges = target.history().where("operation = 'MERGE'").collect()
    assert len(merges) == 1
    metadata = json.loads(merges[0].userMetadata)
    assert metadata["pipeline"] == "orders" and metadata["batch_id"] == 0
    # every partition's planned range is recorded, the idle one too (issue 20.3)
    assert metadata["end_offsets"] == {pipeline.source.kafka.topics[0]: {"0": 2, "1": 0}}


def test_new_checkpoint_gets_a_new_app_id(spark, sender, pipeline, tmp_path):
    from dataclasses import replace

    sender.send(order(1), uid="u-1")
    sender.flush()
    run_once(spark, pipeline)
    sender.send(order(2), uid="u-2")
    sender.flush()
    fresh = replace(pipeline, checkpoint=str(tmp_path / "checkpoints" / "reset"))
    run_once(spark, fresh)  # batch ids restart at 0: a reused app id would skip this write

    assert sorted(r._uid for r in table(spark, pipeline.target.path).collect()) == ["u-1", "u-2"]
    app_ids = {json.loads(r.userMetadata)["app_id"] for r in
               DeltaTable.forPath(spark, pipeline.target.path).history().where("operation = 'MERGE'").collect()}
    assert len(app_ids) == 2


def test_upsert_keeps_the_latest_across_out_of_order_batches(spark, sender, pipeline):
    from ingest.spec.model import Uid

    pipeline = with_target(pipeline, mode="upsert", order_by="ts")
    pipeline = pipeline.__class__(**{**pipeline.__dict__, "uid": Uid(field="order_id")})
    sender.send(order(1, amount=2.0, ts="2026-11-01T12:00:00"))
    sender.flush()
    run_once(spark, pipeline)
    sender.send(order(1, amount=1.0, ts="2026-11-01T11:00:00"))  # older, arrives later
    sender.send(order(1, amount=3.0, ts="2026-11-01T13:00:00"))
    sender.send(order(1, amount=2.5, ts="2026-11-01T12:30:00"))
    sender.flush()
    run_once(spark, pipeline)
    sender.send(order(1, amount=0.5, ts="2026-11-01T09:00:00"))
    sender.flush()
    run_once(spark, pipeline)

    rows = table(spark, pipeline.target.path).collect()
    assert [(r._uid, r.amount) for r in rows] == [("o1", 3.0)]


def test_two_pipelines_in_one_session_do_not_mix_txn_settings(spark, kafka, sender, pipeline, tmp_path):
    from dataclasses import replace

    from ingest.stream.query import start_query

    for i in range(20):
        sender.send(order(i), uid=f"u-{i}", partition=i % 2)
    sender.flush()
    other = replace(pipeline, name="orders_copy",
                    target=replace(pipeline.target, path=str(tmp_path / "tables" / "copy")),
                    checkpoint=str(tmp_path / "checkpoints" / "copy"),
                    dead_letter=replace(pipeline.dead_letter, path=str(tmp_path / "dead_letter" / "copy")))
    queries = [start_query(spark, p, once=True)[0] for p in (pipeline, other)]
    try:
        for query in queries:
            assert query.awaitTermination(240)
            assert query.exception() is None
    finally:
        for query in queries:
            query.stop()
    for p in (pipeline, other):
        assert table(spark, p.target.path).count() == 20
        entries = [json.loads(r.userMetadata) for r in DeltaTable.forPath(spark, p.target.path)
                   .history().where("operation = 'MERGE'").collect()]
        assert {e["pipeline"] for e in entries} == {p.name}
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None


def test_tables_are_readable_by_an_independent_delta_reader(spark, sender, pipeline):
    from deltalake import DeltaTable as RustDeltaTable

    for i in range(10):
        sender.send(order(i), uid=f"u-{i}", partition=i % 2)
    sender.send(b"[broken", uid="bad")
    sender.flush()
    run_once(spark, pipeline)

    for path in (pipeline.target.path, pipeline.dead_letter.path):
        rust = RustDeltaTable(path).to_pyarrow_table()
        spark_rows = table(spark, path).count()
        assert rust.num_rows == spark_rows
    uids = sorted(RustDeltaTable(pipeline.target.path).to_pyarrow_table().column("_uid").to_pylist())
    assert uids == sorted(f"u-{i}" for i in range(10))
