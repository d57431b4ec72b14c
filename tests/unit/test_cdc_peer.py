"""`bench/run cdc_peer`'s pure parts (bench/harness/cdc_stream.py, bench/studies/cdc_peer.py): the
change stream, the state it should leave, what the textbook foreachBatch MERGE leaves, the keys a
table got wrong, and P2."""

import json

from bench.harness.cdc_stream import (
    FIRST_ID,
    FIRST_LSN,
    Change,
    Sent,
    Shape,
    Wrong,
    change_stream,
    expected_state,
    initial_rows,
    offset_ranges,
    row_of,
    stream_figures,
    textbook_state,
    wrong_keys,
)
from bench.studies.cdc_peer import summarize

A, B, C, D = FIRST_ID, FIRST_ID + 1, FIRST_ID + 2, FIRST_ID + 3  # keys of a 3-row table, D new
SHAPE = Shape(keys=2_000, changes=6_000, resend_lag=500)


def test_the_stream_holds_creates_updates_deletes_and_spread_and_recent_keys():
    changes = change_stream(SHAPE)
    figures = stream_figures(SHAPE, changes)
    assert figures["changes"] == 6_000
    assert figures["creates"] > 500 and figures["deletes"] > 200 and figures["updates"] > 3_000
    assert figures["new_keys"] > 500  # a tenth of the changes create keys above the table
    # spread: keys all over the initial table, not only its newest hundredth
    assert len({c.key for c in changes if c.key < FIRST_ID + 1_000}) > 500
    assert [c.lsn for c in changes if not c.resent] == list(range(FIRST_LSN + 1, FIRST_LSN + 1 + 6_000 -
                                                                   figures["resent"]))


def test_a_key_is_created_only_when_absent_and_updated_or_deleted_only_when_live():
    live = dict.fromkeys(range(FIRST_ID, FIRST_ID + SHAPE.keys), True)
    for change in change_stream(SHAPE):
        if change.resent:
            continue
        assert (change.op == "c") == (not live.get(change.key, False)), change
        live[change.key] = change.op != "d"


def test_each_resend_is_an_earlier_change_sent_again_after_a_newer_one_of_its_key_and_the_lag():
    changes = change_stream(SHAPE)
    resent = [(n, c) for n, c in enumerate(changes) if c.resent]
    assert 60 <= len(resent) <= 180  # about 2% of 6,000, none in the first 500 sends
    for n, again in resent:
        first = next(i for i, c in enumerate(changes) if c.lsn == again.lsn and not c.resent)
        original = changes[first]
        assert (original.key, original.op, original.value()) == (again.key, again.op, again.value())
        assert SHAPE.resend_lag <= n - first <= 2 * SHAPE.resend_lag
        assert any(c.key == again.key and c.lsn > again.lsn for c in changes[first:n]), "not out of order"


def test_the_stream_is_the_same_for_the_same_shape():
    assert change_stream(SHAPE) == change_stream(SHAPE)
    assert change_stream(SHAPE) != change_stream(Shape(keys=2_000, changes=6_000, resend_lag=500, seed=1))


def test_a_change_is_debeziums_json_envelope_keyed_by_the_row_key():
    update = json.loads(Change(A, "u", FIRST_LSN + 5).value())
    assert update["op"] == "u" and update["before"] is None
    assert update["after"] == {"id": A, "name": f"name-{A}", "email": f"user{A}@example.com",
                               "tier": f"v{FIRST_LSN + 5}"}
    assert update["source"]["lsn"] == FIRST_LSN + 5 and update["source"]["connector"] == "postgresql"
    delete = json.loads(Change(A, "d", FIRST_LSN + 6).value())
    assert delete["after"] is None and delete["before"] == {"id": A, "name": None, "email": None, "tier": None}
    assert json.loads(Change(A, "d", 1).message_key()) == {"id": A}


def test_the_expected_state_is_each_keys_highest_position_whatever_the_order_of_arrival():
    changes = [Change(A, "u", 12), Change(A, "u", 11),  # A's older update arrives last
               Change(B, "d", 13), Change(B, "u", 11, resent=True),  # B's delete, then an older update
               Change(D, "c", 14), Change(D, "c", 14, resent=True)]  # a new key, sent twice
    assert expected_state(3, changes) == {A: row_of(A, "v12"), C: row_of(C, None), D: row_of(D, "v14")}


def test_the_textbook_method_is_right_within_a_batch_and_wrong_for_a_later_batchs_resend():
    late_update = [[Change(A, "u", 12), Change(A, "u", 11)], [Change(A, "u", 11, resent=True)]]
    assert textbook_state(1, late_update[:1]) == {A: row_of(A, "v12")}  # within a batch: the newest
    assert textbook_state(1, late_update) == {A: row_of(A, "v11")}  # a later batch: the re-send wins
    resurrected = [[Change(B, "d", 13)], [Change(B, "u", 11, resent=True)]]
    assert textbook_state(2, resurrected) == {A: row_of(A, None), B: row_of(B, "v11")}
    assert expected_state(2, [c for batch in resurrected for c in batch]) == {A: row_of(A, None)}


def test_the_textbook_method_over_the_stream_gets_keys_wrong_that_the_expected_state_does_not():
    changes = change_stream(SHAPE)
    expected = expected_state(SHAPE.keys, changes)
    one_batch = textbook_state(SHAPE.keys, [changes])
    assert wrong_keys(expected, one_batch.values()).keys == 0  # one batch: its newest-first rank is right
    batches = [changes[n:n + 500] for n in range(0, len(changes), 500)]
    wrong = wrong_keys(expected, textbook_state(SHAPE.keys, batches).values())
    assert wrong.keys >= 10 and wrong.differing > 0


def test_wrong_keys_counts_missing_extra_differing_and_duplicated_keys():
    expected = {A: row_of(A, "v1"), B: row_of(B, "v2"), C: row_of(C, "v3")}
    found = [row_of(A, "v1"), row_of(B, "v0"), row_of(D, "v4"), row_of(D, "v4")]
    assert wrong_keys(expected, found) == Wrong(missing=1, extra=0, differing=1, duplicated=1)
    assert wrong_keys(expected, found).keys == 3
    assert wrong_keys(initial_rows(2), initial_rows(2).values()).keys == 0


def test_the_batches_spark_cut_are_read_from_its_progress_and_the_offsets_each_change_landed_at():
    first, second, third = Change(A, "u", 11), Change(B, "d", 12), Change(A, "u", 13)
    sent = Sent({(0, 0): first, (1, 0): second, (1, 1): None, (0, 1): third})
    progress = [
        {"numInputRows": 3, "sources": [{"startOffset": None, "endOffset": {"t": {"0": 1, "1": 2}}}]},
        {"numInputRows": 0, "sources": [{"startOffset": '{"t": {"0": 1, "1": 2}}',
                                         "endOffset": '{"t": {"0": 1, "1": 2}}'}]},
        {"numInputRows": 1, "sources": [{"startOffset": '{"t": {"0": 1, "1": 2}}',
                                         "endOffset": '{"t": {"0": 2, "1": 2}}'}]},
    ]
    ranges = offset_ranges(progress, "t")
    assert ranges == [{0: (0, 1), 1: (0, 2)}, {0: (1, 2), 1: (2, 2)}]
    assert sent.batches(ranges) == [[first, second], [third]]


def test_p2_is_ingests_rate_over_the_textbooks_within_each_repetition():
    def run(rep, leg, rate):
        return {"rep": rep, "leg": leg, "changes_per_second": rate, "seconds": 1.0, "cpu_seconds_per_million": 1.0,
                "rss_peak_mb": 1, "batches": 4, "settle_seconds": 0.0, "wrong": {"keys": 0}}

    summary = summarize([run(0, "ingest", 800.0), run(0, "textbook", 1000.0),
                         run(1, "textbook", 500.0), run(1, "ingest", 600.0)])
    assert summary["P2_per_rep"] == [0.8, 1.2] and summary["P2"] == 1.0


def test_the_report_gives_p2_with_its_verdict_and_each_sides_wrong_keys():
    from bench.studies.cdc_peer import text_report

    def run(rep, leg, rate, wrong):
        return {"rep": rep, "leg": leg, "changes_per_second": rate, "seconds": 10.0, "cpu_seconds_per_million": 90.0,
                "rss_peak_mb": 2_000, "batches": 5, "settle_seconds": 0.1, "wrong": {"keys": wrong},
                "wrong_against_own_method": {"keys": 0}}

    runs = [run(0, "ingest", 900.0, 0), run(0, "textbook", 1000.0, 812), run(1, "textbook", 1000.0, 812),
            run(1, "ingest", 950.0, 0)]
    stream = stream_figures(SHAPE, change_stream(SHAPE))
    machine = {"cpu": "cpu", "cores": 2, "memory_gb": 8, "os": "Linux", "python": "3.11", "java": "java 17",
               "pyspark": "4.2.0", "delta_spark": "4.4.0", "confluent_kafka": "2", "load_start": 1.0, "load_end": 2.0}
    results = {"summary": summarize(runs), "stream": stream, "runs": runs, "records": 6_500, "reps": 2,
               "scale": {"name": "quick", "files": 4, "max_offsets": 500}, "machine": machine,
               "started_at": "2026-12-02 05:40 UTC", "elapsed_seconds": 300.0, "expected_live": 2_100}
    text = text_report(results)
    assert "`bench/run cdc_peer --quick`" in text
    assert "| P2 | changes/s of ingest / the textbook foreachBatch MERGE | 0.93 | 0.90, 0.95 | >= 1.0 | missed |" \
        in text
    assert "| textbook | 10.0 | 1,000 | 90.0 | 2,000 | 5 | 812, 812 |" in text
    assert "| ingest | 10.0 | 925 | 90.0 | 2,000 | 5 | 0, 0 |" in text
