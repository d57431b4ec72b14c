"""The ledger entry each commit carries, and what is read back from it (no JVM)."""

import json

from ingest.batch.commit.ledger import batch_txn, parse_metadata, recorded_origin


def entry(version, end, origin=None):
    txn = batch_txn("orders", "q1", version, end, origin=origin)
    return version, parse_metadata(txn.metadata)


def test_the_origin_is_recorded_with_the_end_offsets():
    txn = batch_txn("orders", "q1", 3, {"t": {1: 9, 0: 7}}, {"read": 2}, origin={"t": {0: 5, 1: 4}})
    document = json.loads(txn.metadata)
    assert document["origin"] == {"t": {"0": 5, "1": 4}}
    assert document["end_offsets"] == {"t": {"0": 7, "1": 9}}
    assert "origin" not in json.loads(batch_txn("orders", "q1", 3, {"t": {0: 7}}).metadata)


def test_the_oldest_origin_wins_and_a_later_partition_takes_its_first():
    entries = [entry(7, {"t": {0: 30, 2: 3}}, origin={"t": {0: 20, 1: 12, 2: 0}}),  # after a recovery
               entry(2, {"t": {0: 12}}, origin={"t": {0: 10, 1: 12}}),
               entry(1, {"t": {0: 11}})]  # written before origins were recorded
    assert recorded_origin(entries) == {"t": {0: 10, 1: 12, 2: 0}}


def test_no_origin_recorded():
    assert recorded_origin([entry(1, {"t": {0: 11}})]) is None
    assert recorded_origin([]) is None
