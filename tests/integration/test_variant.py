"""VARIANT payloads (issue 56): `source.schema: variant` lands each record's JSON as one
VARIANT column `payload`; the uid, the dedup horizon and an upsert's order are paths in it
(`payload:order.id::string`); a transform extracts columns. Real broker, Spark and Delta;
delta-rs (`deltalake`) reads the table but not inside a VARIANT (docs/formats.md)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pyarrow as pa
from delta.tables import DeltaTable
from deltalake import DeltaTable as RustTable

import ingest
from ingest.batch.commit import faults
from ingest.cli import main
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import DedupHorizon, Source, Transform, Uid
from ingest.stream.replay import replay, resolve_range
from tests.integration.conftest import crash_at, run_once, run_recovering, table, with_target


def order(order_id, ts: str = "2026-11-28T09:00:00Z", **more) -> dict:
    return {"order": {"id": order_id, "lines": [{"sku": f"sku-{order_id}", "qty": 2}]},
            "customer": {"name": f"c-{order_id}"}, "ts": ts, **more}


def variant_pipeline(pipeline, **uid):
    return replace(pipeline, source=replace(pipeline.source, schema="variant", unknown_fields="ignore"),
                   uid=Uid(**(uid or {"field": "payload:order.id::string"})))


def ids(spark, path) -> list[str]:
    return sorted(r.id for r in spark.sql(f"SELECT payload:order.id::string AS id FROM delta.`{path}`").collect())


def test_nested_json_lands_as_variant_dedups_by_a_path_and_survives_a_crash_and_a_replay(
        spark, sender, pipeline, tmp_path, monkeypatch):
    orders = replace(with_target(variant_pipeline(pipeline),
                                 dedup_horizon=DedupHorizon("payload:ts::timestamp", "1 hour", 3600)),
                     transform=Transform(select=("*", "payload:customer.name::string AS customer")))
    path = orders.target.path
    for n in range(6):
        sender.send(order(f"o{n}"), partition=n % 2)
    sender.send(order("o1", ts="2026-11-28T09:00:05Z"), partition=1)  # o1 again, at a later offset
    sender.send(b'{"order": {"id": "o9"', partition=1)  # malformed JSON
    sender.send({"order": {"number": 10}, "ts": "2026-11-28T09:00:00Z"}, partition=1)  # no order.id
    sender.flush()
    run_once(spark, orders, timeout=900)

    assert DeltaTable.forPath(spark, path).toDF().schema["payload"].dataType.typeName() == "variant"
    assert "variantType" in DeltaTable.forPath(spark, path).detail().first().tableFeatures
    assert ids(spark, path) == [f"o{n}" for n in range(6)]
    assert sorted(r._uid for r in table(spark, path).collect()) == [f"o{n}" for n in range(6)]
    first_o1 = spark.sql(f"SELECT _offset, payload:ts::string AS ts, customer FROM delta.`{path}` "
                         "WHERE payload:order.id::string = 'o1'").collect()
    assert [(r.ts, r.customer) for r in first_o1] == [("2026-11-28T09:00:00Z", "c-o1")]  # the first copy
    skus = spark.sql(f"SELECT payload:order.lines[0].sku::string AS sku FROM delta.`{path}` ORDER BY sku")
    assert [r.sku for r in skus.collect()] == [f"sku-o{n}" for n in range(6)]
    dead = {r.stage: r.reason for r in table(spark, orders.dead_letter.path).collect()}
    assert dead == {"decode": "malformed JSON: '{\"order\": {\"id\": \"o9\"'",
                    "uid": "path payload:order.id::string is missing or null, or its value is not a string"}

    # delta-rs 1.6.6 reads the table; the VARIANT arrives as its binary encoding, not as values
    rust = RustTable(path).to_pyarrow_table()
    assert sorted(rust.column("_uid").to_pylist()) == [f"o{n}" for n in range(6)]
    assert {f.name for f in rust.schema.field("payload").type} == {"metadata", "value"}
    assert pa.types.is_binary(rust.schema.field("payload").type.field("value").type)

    # a later duplicate (another offset, another batch) and a crash after the target's commit
    sender.send(order("o2", ts="2026-11-28T09:10:00Z"), partition=1)
    sender.send(order("o6"), partition=0)
    sender.flush()
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    crash_at(spark, orders, "after_target_commit")
    version = DeltaTable.forPath(spark, path).history(1).first().version
    run_once(spark, orders, timeout=900)
    assert DeltaTable.forPath(spark, path).history(1).first().version == version  # the replay: no commit
    assert ids(spark, path) == [f"o{n}" for n in range(7)]

    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(orders)))
    assert ingest.verify(spark, file).ok
    assert ingest.status(spark, file).table_exists
    span = resolve_range(spark, orders, from_ms=0)
    reports = replay(spark, orders, span)
    assert sum(r.merged.inserted for r in reports) == 0 and sum(r.summary.read for r in reports) == 9
    assert ids(spark, path) == [f"o{n}" for n in range(7)]

    shutil.rmtree(orders.checkpoint)  # the checkpoint lost: the run starts from the target's ledger
    sender.send(order("o7"), partition=1)
    sender.flush()
    plan, _ = run_recovering(spark, orders)
    assert plan.starting_offsets == {orders.source.kafka.topics[0]: {0: 4, 1: 7}}, plan.notes
    assert ids(spark, path) == [f"o{n}" for n in range(8)]

    DeltaTable.forPath(spark, path).delete("payload:order.id::string = 'o3'")  # a tampering
    found = ingest.verify(spark, file)
    assert not found.ok and [m.uid for m in found.missing_examples] == ["o3"]


def test_an_upsert_keeps_the_latest_version_by_a_path_and_leaves_the_same_values_alone(
        spark, sender, pipeline, tmp_path):
    orders = with_target(variant_pipeline(pipeline), mode="upsert", order_by="payload:version::bigint")
    path = orders.target.path
    sender.send(order("a", version=1, status="new"), partition=0)
    sender.send(order("a", version=3, status="shipped"), partition=1)
    sender.send(order("a", version=2, status="paid"), partition=0)
    sender.send(order("b", version=1, status="new"), partition=1)
    sender.send(order("e", version=1, status="new"), partition=1)
    sender.send(order("c", status="no version"), partition=0)  # upsert needs the order: a dead letter
    sender.flush()
    run_once(spark, orders, timeout=900)
    def state() -> list[tuple]:  # a new read each time: a DataFrame keeps the snapshot it was made on
        return [tuple(r) for r in spark.sql(f"SELECT _uid, payload:status::string FROM delta.`{path}` "
                                            "ORDER BY _uid").collect()]

    assert state() == [("a", "shipped"), ("b", "new"), ("e", "new")]
    assert [r.reason for r in table(spark, orders.dead_letter.path).collect()] == [
        "order_by path 'payload:version::bigint' is null; upsert needs it to tell the latest version"]

    sender.send(order("a", version=2, status="late"), partition=0)  # older than the row: no change
    sender.send(order("b", version=1, status="new"), partition=1)  # the same values again: no update
    sender.send(order("d", version=1, status="new"), partition=0)
    sender.send(order("e", version=2, status="paid"), partition=0)
    sender.flush()
    [report] = run_once(spark, orders, timeout=900)
    assert (report.merged.inserted, report.merged.updated) == (1, 1)
    assert state() == [("a", "shipped"), ("b", "new"), ("d", "new"), ("e", "paid")]
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(orders)))
    assert ingest.verify(spark, file).ok


def test_validate_names_the_key_of_a_malformed_path_and_exits_2(pipeline, tmp_path, capsys):
    bad = replace(variant_pipeline(pipeline, field="payload:order..id::string"),
                  source=Source(pipeline.source.kafka, "json", "variant", unknown_fields="ignore"))
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(bad)))
    assert main(["validate", "--no-spark", str(file)]) == 2
    said = capsys.readouterr()
    assert "uid.field: 'payload:order..id::string' is not a path in a VARIANT column: cannot read '..id' " \
           "after 'order'" in said.out + said.err
