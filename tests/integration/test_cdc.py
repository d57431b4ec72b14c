"""Change data capture against the real broker, Spark and Delta: Debezium envelopes,
soft and hard deletes, out-of-order changes across batches, snapshots, SCD2 history."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ingest.spec.model import Cdc, Uid
from tests.integration.conftest import DebeziumChanges, table, with_target
from tests.integration.conftest import run_once as run_to_end

ROW = "id BIGINT, name STRING, tier STRING"


def run_once(spark, pipeline):
    return run_to_end(spark, pipeline, timeout=900)  # generous: a shared 2-core machine is slow


@pytest.fixture
def changes(kafka, topic):
    return DebeziumChanges(kafka, topic)


@pytest.fixture
def cdc(pipeline):
    """The test pipeline, reading customer changes: soft deletes unless a test says otherwise."""
    return replace(pipeline, name="customers", source=replace(pipeline.source, schema=ROW),
                   uid=Uid(field="id"), cdc=Cdc(key=("id",)),
                   target=replace(pipeline.target, mode="upsert"))


def rows(spark, pipeline, *columns):
    found = table(spark, pipeline.target.path).orderBy("id", *(["_valid_from"] if "_valid_from" in columns else []))
    return [tuple(r) for r in found.select("id", *columns).collect()]


def test_inserts_updates_deletes_in_one_batch_and_across_batches(spark, changes, cdc):
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("u", 1, 11, {"name": "ann", "tier": "b"})
    changes.send("c", 2, 12, {"name": "bob", "tier": "a"})
    changes.send("d", 2, 13)  # inserted and deleted in one batch
    changes.send("c", 3, 14, {"name": "cy", "tier": "a"})
    changes.send("u", 3, 15, {"name": "cy", "tier": "c"}, partition=1)  # same key, other partition
    changes.flush()
    run_once(spark, cdc)
    assert rows(spark, cdc, "tier", "_deleted", "_sequence", "_op") == [
        (1, "b", False, 11, "u"), (2, None, True, 13, "d"), (3, "c", False, 15, "u")]

    changes.send("d", 1, 20)
    changes.send("c", 2, 21, {"name": "bob", "tier": "z"})  # back after its delete
    changes.send("u", 3, 22, {"name": "cy", "tier": "d"})
    changes.send("u", 3, 23, {"name": "cy", "tier": "e"})
    changes.flush()
    run_once(spark, cdc)
    assert rows(spark, cdc, "name", "tier", "_deleted", "_sequence") == [
        (1, "ann", "b", True, 20), (2, "bob", "z", False, 21), (3, "cy", "e", False, 23)]


@pytest.mark.parametrize("deletes", ["soft", "hard"])
def test_a_delete_before_the_older_update_does_not_resurrect(spark, changes, cdc, deletes):
    cdc = with_target(cdc, deletes=deletes)
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.send("d", 1, 30)  # the delete arrives first (the batch reduces key 1 to it) ...
    changes.flush()
    run_once(spark, cdc)
    changes.send("u", 1, 20, {"name": "ann", "tier": "late"})  # ... the older update after it
    changes.send("u", 2, 21, {"name": "bob", "tier": "b"})
    changes.flush()
    run_once(spark, cdc)
    if deletes == "soft":
        assert rows(spark, cdc, "tier", "_deleted", "_sequence") == [(1, None, True, 30), (2, "b", False, 21)]
    else:
        assert rows(spark, cdc, "tier", "_sequence") == [(2, "b", 21)]
        assert "_deleted" not in table(spark, cdc.target.path).columns
        log = table(spark, cdc.target.path + "_deletes")
        assert [(r._uid, r._sequence) for r in log.collect()] == [("1", 30)]


def test_a_snapshot_read_after_live_changes(spark, changes, cdc):
    changes.send("u", 1, 100, {"name": "ann", "tier": "live"})
    changes.flush()
    run_once(spark, cdc)
    changes.send("r", 1, 90, {"name": "ann", "tier": "snapshot"})  # read before the live change
    changes.send("r", 2, 90, {"name": "bob", "tier": "snapshot"})
    changes.flush()
    run_once(spark, cdc)
    assert rows(spark, cdc, "tier", "_op") == [(1, "live", "u"), (2, "snapshot", "r")]


def test_with_and_without_the_schema_wrapper_and_bad_envelopes(spark, changes, cdc):
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"}, wrapped=True)
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.send("d", 2, 12, wrapped=True)
    changes.raw(None, 2)  # Debezium's tombstone after the delete: the same delete again
    changes.raw(json.dumps({"after": {"id": 3}, "ts_ms": 1, "source": {"lsn": 13}}).encode(), 3)
    changes.raw(json.dumps({"op": "x", "after": {"id": 4}, "ts_ms": 1, "source": {"lsn": 14}}).encode(), 4)
    changes.raw(json.dumps({"op": "d", "before": {"name": "no key"}, "ts_ms": 1,
                            "source": {"lsn": 15}}).encode(), 5)
    changes.raw(json.dumps({"op": "u", "after": {"id": 6}, "source": {}}).encode(), 6)
    changes.raw(b'{"op": "c", "after": ', 7)
    changes.flush()
    reports = run_once(spark, cdc)
    # key 2's create and delete reduce to the delete, whose before image holds the key only
    assert rows(spark, cdc, "name", "_deleted") == [(1, "ann", False), (2, None, True)]
    dead = table(spark, cdc.dead_letter.path).orderBy("_offset")
    assert [r.reason for r in dead.collect()] == [
        "missing field 'op'; expected c, r, u or d",
        "unknown op 'x' in field 'op'; expected c, r, u or d",
        "delete (op 'd') without the key: before.id is null",
        "null sequence: source.lsn (or ts_ms where there is no lsn) is missing or not a whole number",
        "malformed JSON or a value of the wrong type for the envelope"]
    assert sum(r.summary.by_stage["filtered"] for r in reports) == 1  # the tombstone, counted


def test_scd2_history_with_exact_validity(spark, changes, cdc):
    cdc = with_target(cdc, history=True)
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("u", 1, 20, {"name": "ann", "tier": "b"})
    changes.send("c", 2, 15, {"name": "bob", "tier": "a"})
    changes.flush()
    run_once(spark, cdc)
    changes.send("u", 1, 40, {"name": "ann", "tier": "d"})
    changes.send("d", 2, 50)
    changes.send("u", 1, 30, {"name": "ann", "tier": "c"})  # late: slots in between 20 and 40
    changes.send("u", 2, 45, {"name": "bob", "tier": "late"})  # late, before the delete
    changes.flush()
    run_once(spark, cdc)
    changes.send("u", 1, 20, {"name": "ann", "tier": "b"}, partition=0)  # a re-sent change
    changes.flush()
    run_once(spark, cdc)
    assert rows(spark, cdc, "tier", "_valid_from", "_valid_to", "_current", "_deleted") == [
        (1, "a", 10, 20, False, False), (1, "b", 20, 30, False, False), (1, "c", 30, 40, False, False),
        (1, "d", 40, None, True, False),
        (2, "a", 15, 45, False, False), (2, "late", 45, 50, False, False), (2, None, 50, None, False, True)]


def test_verify_finds_a_key_the_table_got_wrong(spark, changes, cdc):
    from delta.tables import DeltaTable

    from ingest.audit.verify_changes import verify_changes

    cdc = with_target(cdc, deletes="hard")
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.send("d", 2, 12)
    changes.send("c", 3, 13, {"name": "cy", "tier": "a"})
    changes.flush()
    run_once(spark, cdc)
    report = verify_changes(spark, cdc)
    assert (report.ok, report.changes, report.keys, report.live, report.deleted) == (True, 4, 3, 2, 1)

    DeltaTable.forPath(spark, cdc.target.path).update("id = 3", {"tier": "'x'"})
    report = verify_changes(spark, cdc)
    assert (report.ok, report.differing) == (False, 1)
    assert report.examples[0].uid == "3" and '"tier":"a"' in report.examples[0].expected
    assert '"tier":"x"' in report.examples[0].found


CUSTOMER_ROW = {"type": "record", "name": "Value", "namespace": "shop.public.customers",
                "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
                           {"name": "tier", "type": ["null", "string"]}]}
DEBEZIUM_AVRO = {  # Debezium's Avro envelope for a Postgres table, as its AvroConverter registers it
    "type": "record", "name": "Envelope", "namespace": "shop.public.customers",
    "fields": [
        {"name": "before", "type": ["null", CUSTOMER_ROW], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "connector", "type": "string"},
                                               {"name": "ts_ms", "type": "long"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def test_debezium_avro_envelopes_through_the_same_merge(spark, kafka, topic, registry, cdc):
    from confluent_kafka import Producer

    from tests.integration.test_avro import avro_pipeline, serialized

    def change(op, key, lsn, tier=None):
        row = {"id": key, "name": f"n{key}", "tier": tier}
        return serialized(registry, topic, DEBEZIUM_AVRO, {
            "before": row if op == "d" else None, "after": None if op == "d" else row,
            "source": {"connector": "postgresql", "ts_ms": 1, "lsn": lsn}, "op": op, "ts_ms": 1})

    producer = Producer(kafka.client_config())
    for value in (change("c", 1, 10, "a"), change("u", 1, 12, "b"), change("u", 1, 11, "late"),
                  change("c", 2, 13, "a"), change("d", 2, 14), None, b"\x00\x00\x00\x00\x63junk"):
        producer.produce(topic, key=b"k", value=value, partition=0)
    assert producer.flush(30) == 0
    cdc = avro_pipeline(replace(cdc, source=replace(cdc.source, schema=None)), registry)
    run_once(spark, cdc)

    assert rows(spark, cdc, "name", "tier", "_deleted", "_sequence", "_op") == [
        (1, "n1", "b", False, 12, "u"), (2, "n2", None, True, 14, "d")]  # a delete from before
    dead = table(spark, cdc.dead_letter.path).collect()
    assert [r.stage for r in dead] == ["decode"] and "schema id 99" in dead[0].reason
