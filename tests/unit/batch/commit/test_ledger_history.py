"""Which commits of a table's history are still in effect, and Spark's offset log files."""

from __future__ import annotations

from collections import namedtuple

from ingest.batch.commit import ledger
from ingest.kafka import checkpoint

Row = namedtuple("Row", "version timestamp operation operationParameters userMetadata")


def commit(version, operation="MERGE", parameters=None, stamp=None):
    return Row(version, stamp or f"2026-11-23 09:00:{version:02d}", operation, parameters or {}, None)


def test_a_restore_undoes_the_commits_between_its_version_and_itself():
    rows = [commit(6), commit(5, "RESTORE", {"version": "2"}), commit(4), commit(3), commit(2), commit(1)]
    assert [r.version for r in ledger.live_commits(rows)] == [6, 2, 1]


def test_a_restore_to_a_timestamp_goes_back_to_the_last_version_at_or_before_it():
    rows = [commit(4, "RESTORE", {"timestamp": "2026-11-23 09:00:02"}), commit(3), commit(2), commit(1)]
    assert [r.version for r in ledger.live_commits(rows)] == [2, 1]


def test_restores_nest_and_a_replace_ends_the_history():
    rows = [commit(9, "RESTORE", {"version": "7"}), commit(8), commit(7), commit(6, "RESTORE", {"version": "3"}),
            commit(5), commit(4), commit(3), commit(2, "CREATE OR REPLACE TABLE"), commit(1)]
    assert [r.version for r in ledger.live_commits(rows)] == [7, 3]


def test_deletes_and_updates_undo_nothing():
    rows = [commit(3, "DELETE"), commit(2, "UPDATE"), commit(1)]
    assert [r.version for r in ledger.live_commits(rows)] == [3, 2, 1]


def test_the_offset_log_files(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"t":{"1":4,"0":7}}\n')
    (tmp_path / "sources" / "0" / "0").write_text('\x00v1\n{"t":{"0":2,"1":0}}')
    assert checkpoint.planned_end(None, str(tmp_path), 0) == {"t": {0: 7, 1: 4}}
    assert checkpoint.planned_start(None, str(tmp_path), 0) == {"t": {0: 2, 1: 0}}
    assert checkpoint.planned_start(None, str(tmp_path), 1) == {"t": {0: 7, 1: 4}}
    assert checkpoint.planned_end(None, str(tmp_path), 1) is None


def test_a_ledger_entry_carries_the_planned_range_and_topic_ids():
    txn = ledger.batch_txn("p", "q", 3, {"t": {1: 9, 0: 5}}, {"read": 2}, start_offsets={"t": {0: 4, 1: 9}},
                           topic_ids={"t": "abc"})
    entry = ledger.parse_metadata(txn.metadata)
    assert (entry["batch_id"], entry["topic_ids"]) == (3, {"t": "abc"})
    assert ledger.entry_offsets(entry) == {"t": {0: 5, 1: 9}}
    assert ledger.entry_offsets(entry, "start_offsets") == {"t": {0: 4, 1: 9}}
