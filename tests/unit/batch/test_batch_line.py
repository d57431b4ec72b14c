"""The batch line's counts per operation (issue 28.4): never negative, a hard delete is a delete."""

from ingest.batch.merge.target import MergeResult
from ingest.batch.processor import BatchReport, BatchSummary


def line(unique: int, merged: MergeResult) -> str:
    summary = BatchSummary(read=unique, unique=unique, by_stage={}, start_offsets={"t": {0: 0}},
                           end_offsets={"t": {0: unique}}, bounds={})
    return BatchReport("p", 0, summary, merged, 1.0).line()


def test_history_writes_more_versions_than_records_and_nothing_goes_negative():
    # SCD2: four changes insert five versions (a late one splits an interval), as issue 28.4 saw
    assert "merged 4 (inserted 5, updated 0, deleted 0, unchanged 0)" in line(4, MergeResult(5, 0))


def test_a_hard_delete_is_counted_as_deleted_not_unchanged():
    assert "merged 3 (inserted 1, updated 1, deleted 1, unchanged 0)" in line(3, MergeResult(1, 1, 1))
    assert "merged 3 (inserted 0, updated 1, deleted 0, unchanged 2)" in line(3, MergeResult(0, 1))


def test_records_with_unknown_fields_are_counted_in_the_line():
    summary = BatchSummary(read=3, unique=3, by_stage={}, start_offsets={"t": {0: 0}}, end_offsets={"t": {0: 3}},
                           bounds={}, unknown_fields=2, unknown_example="weight")
    assert BatchReport("p", 0, summary, MergeResult(3, 0), 1.0).line().endswith(
        "; 2 record(s) with fields the schema does not name (e.g. weight), merged without them "
        "(source.unknown_fields: warn)")


def test_the_line_says_where_the_dead_letters_are():
    summary = BatchSummary(read=3, unique=1, by_stage={"uid": 2}, start_offsets={"t": {0: 0}},
                           end_offsets={"t": {0: 3}}, bounds={})
    report = BatchReport("p", 0, summary, MergeResult(1, 0), 1.0, dead_letters_at="/data/p_dead_letter")
    assert "dead letters 2 (decode 0, transform 0, uid 2) in /data/p_dead_letter, filtered 0" in report.line()
    clean = BatchSummary(read=1, unique=1, by_stage={}, start_offsets={"t": {0: 0}}, end_offsets={"t": {0: 1}},
                         bounds={})
    assert " in /data" not in BatchReport("p", 0, clean, MergeResult(1, 0), 1.0, dead_letters_at="/data/x").line()
