"""`verify`'s value check on real runs: it follows schema evolution (issue 27.8) and judges
the delete state of a tombstone pipeline (issue 27.9)."""

from __future__ import annotations

from dataclasses import replace

from delta.tables import DeltaTable

from ingest.audit.verify import verify
from ingest.spec.model import Uid
from tests.integration.conftest import Sender, registry_spec, run_once
from tests.integration.test_avro import serialized
from tests.integration.test_cdc_tombstones import Keyed

V1 = {"type": "record", "name": "Click", "fields": [
    {"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "channel", "type": "string", "default": "unknown"}]}
V3 = {**V1, "fields": V2["fields"] + [{"name": "region", "type": ["null", "string"], "default": None}]}


def test_a_field_added_with_a_default_and_a_reader_newer_than_the_table(spark, kafka, topic, pipeline, registry):
    pipeline = replace(pipeline, source=replace(pipeline.source, format="avro", schema=None,
                                                registry=registry_spec(registry)))
    sender = Sender(kafka, topic)
    sender.send(serialized(registry, topic, V1, {"page": "/a", "ms": 1}), uid="c-1")
    sender.flush()
    run_once(spark, pipeline, timeout=900)
    sender.send(serialized(registry, topic, V2, {"page": "/b", "ms": 2, "channel": "ads"}), uid="c-2")
    sender.flush()
    run_once(spark, pipeline, timeout=900)  # the table gains `channel`; c-1's row holds null there

    report = verify(spark, pipeline)
    assert report.ok, report

    sender.send(serialized(registry, topic, V3, {"page": "/c", "ms": 3, "channel": "ads", "region": "eu"}),
                uid="c-3")
    sender.flush()  # the registry's latest has a column the table does not have yet
    newer = verify(spark, pipeline)
    assert newer.ok, newer
    assert newer.not_yet_ingested == 1 and any("region" in note for note in newer.notes), newer.notes


def keyed_upsert(pipeline, deletes):
    """Versions of each Kafka key, ordered by `v`; a tombstone deletes the key (issue 27.9)."""
    return replace(pipeline, name="latest", source=replace(pipeline.source, schema="name STRING, v BIGINT"),
                   uid=Uid(key=True), target=replace(pipeline.target, mode="upsert", order_by="v",
                                                     deletes=deletes))


def test_verify_compares_the_delete_state_of_a_tombstone_pipeline(spark, kafka, topic, pipeline):
    soft = keyed_upsert(pipeline, "soft")
    keyed = Keyed(kafka, topic)
    keyed.send("a", 1), keyed.send("a")  # deleted
    keyed.send("b", 1)
    keyed.flush()
    run_once(spark, soft, timeout=900)
    assert verify(spark, soft).ok

    DeltaTable.forPath(spark, soft.target.path).update("_uid = 'b'", {"_deleted": "true"})
    tampered = verify(spark, soft)
    assert not tampered.ok
    assert any("b (live by its latest record, deleted in the table)" in f for f in tampered.findings), tampered


def test_a_recreated_key_deleted_by_hand_is_found_with_hard_deletes(spark, kafka, topic, pipeline):
    hard = keyed_upsert(pipeline, "hard")
    keyed = Keyed(kafka, topic)
    keyed.send("d", 1), keyed.send("d")  # deleted ...
    keyed.flush()
    run_once(spark, hard, timeout=900)
    keyed.send("d", 2)  # ... then created again
    keyed.flush()
    run_once(spark, hard, timeout=900)
    assert verify(spark, hard).ok

    DeltaTable.forPath(spark, hard.target.path).delete("_uid = 'd'")  # by a user: the delete log has d
    lost = verify(spark, hard)
    assert not lost.ok
    assert any("d (live by its latest record, no row in the table)" in f for f in lost.findings), lost
