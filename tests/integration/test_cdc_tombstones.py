"""Tombstones without cdc, against the real broker, Spark and Delta: in an upsert with
`uid: {key: true}`, a key with a null value deletes the key (soft or hard), in the
upsert's order, within a batch and across batches; verify accounts the deleted keys."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from ingest.audit.verify import verify
from ingest.spec.model import Uid
from tests.integration.conftest import run_once, table, with_target


@pytest.fixture
def latest(pipeline):
    """The latest version of each key: upsert by Kafka key, ordered by `v`."""
    return replace(pipeline, name="latest", source=replace(pipeline.source, schema="name STRING, v BIGINT"),
                   uid=Uid(key=True), target=replace(pipeline.target, mode="upsert", order_by="v"))


class Keyed:
    def __init__(self, kafka, topic):
        self.topic = topic
        self.producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})

    def send(self, key: str, v: int | None = None, name: str | None = None, timestamp: int = 0) -> None:
        """A version of `key`, or with no `v` its tombstone; `timestamp`: the producer's, in ms."""
        value = None if v is None else json.dumps({"name": name or f"{key}{v}", "v": v}).encode()
        self.producer.produce(self.topic, key=key.encode(), value=value, partition=0, timestamp=timestamp)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


@pytest.mark.parametrize("deletes", ["soft", "hard"])
def test_tombstones_delete_in_upsert_order_within_and_across_batches(spark, kafka, topic, latest, deletes):
    latest = with_target(latest, deletes=deletes)
    keyed = Keyed(kafka, topic)
    keyed.send("a", 1), keyed.send("a", 2), keyed.send("a")  # deleted in the batch it came in
    keyed.send("b", 5)
    keyed.send("c"), keyed.send("c", 1)  # a tombstone of a key nothing precedes: the version wins
    keyed.send("d", 3)
    # deleted and created again in this batch: the delete removes only what preceded it
    keyed.send("g", 1), keyed.send("g"), keyed.send("g", 2)  # a later order_by
    keyed.send("h", 3), keyed.send("h"), keyed.send("h", 3, "h3-again")  # the same order_by, a later offset
    keyed.flush()
    run_once(spark, latest, timeout=900)

    keyed.send("a", 1, "a-late")  # older than the version the tombstone deleted: stays deleted
    keyed.send("b"), keyed.send("b", 4, "b-late")  # deletes the target's row; the older one stays out
    keyed.send("d"), keyed.send("d", 4)  # deleted, then a newer version brings it back
    keyed.send("z")  # a key never seen: nothing to delete, but accounted
    keyed.flush()
    run_once(spark, latest, timeout=900)

    found = table(spark, latest.target.path)
    if deletes == "soft":
        assert sorted((r._uid, r.name, r.v, r._deleted, r._op) for r in found.collect()) == [
            ("a", "a2", 2, True, "d"), ("b", "b5", 5, True, "d"), ("c", "c1", 1, False, "u"),
            ("d", "d4", 4, False, "u"), ("g", "g2", 2, False, "u"), ("h", "h3-again", 3, False, "u"),
            ("z", None, None, True, "d")]
    else:
        assert sorted((r._uid, r.name, r.v) for r in found.collect()) == [
            ("c", "c1", 1), ("d", "d4", 4), ("g", "g2", 2), ("h", "h3-again", 3)]
        log = table(spark, latest.target.path + "_deletes")
        assert sorted((r._uid, r._sequence) for r in log.collect()) == [("a", 2), ("b", 5), ("z", None)]

    report = verify(spark, latest)
    assert report.ok, report
    assert (report.unique_uids, report.missing, report.unaccounted, report.dead_letters) == (7, 0, 0, 0)


def test_a_tombstone_with_an_older_producer_clock_still_follows_its_version(spark, kafka, topic, latest):
    """#27.9: within one partition the offset orders, not the producers' timestamps (two producers
    with clocks 10 ms apart left a deleted key alive)."""
    keyed = Keyed(kafka, topic)
    now = int(time.time() * 1000)
    keyed.send("e", 7, timestamp=now), keyed.send("e", timestamp=now - 10)  # in one batch
    keyed.send("f", 3, timestamp=now)
    keyed.flush()
    run_once(spark, latest, timeout=900)
    keyed.send("f", timestamp=now - 10)  # the next batch: the version is in the table
    keyed.flush()
    run_once(spark, latest, timeout=900)
    found = table(spark, latest.target.path)
    assert sorted((r._uid, r.v, r._deleted) for r in found.collect()) == [("e", 7, True), ("f", 3, True)]
