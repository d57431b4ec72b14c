"""A topic recreated under the same name is told apart by its id."""

from __future__ import annotations

from ingest.batch.commit import ledger
from ingest.stream import recovery


def test_the_newest_entry_naming_a_topic_gives_its_recorded_id():
    entries = [(5, {"topic_ids": {"a": "new"}, "end_offsets": {"a": {"0": 3}}}),
               (4, {"topic_ids": {"a": "old", "b": "b1"}, "end_offsets": {"a": {"0": 90}, "b": {"0": 1}}}),
               (3, {"end_offsets": {"a": {"0": 80}}})]
    assert recovery._recreated(entries, {"a": "new", "b": "b1"}) == {}
    assert recovery._recreated(entries, {"a": "newer", "b": "b1"}) == {"a": ("new", "newer")}
    assert recovery._recreated(entries, {"a": "new", "b": "b2"}) == {"b": ("b1", "b2")}


def test_what_an_entry_recorded_under_another_topic_id_is_left_out():
    """Issue 27 point 2: every entry, not only the newest, is read for the current id."""
    entries = [(5, {"topic_ids": {"a": "new"}, "end_offsets": {"a": {"0": 3}}}),
               (4, {"topic_ids": {"a": "old", "b": "b1"}, "end_offsets": {"a": {"0": 90}, "b": {"0": 1}},
                    "origin": {"a": {"0": 0}, "b": {"0": 0}}}),
               (3, {"end_offsets": {"a": {"0": 80}}})]
    kept = dict(ledger.of_current_topics(entries, {"a": "new", "b": "b1"}))
    assert kept[5] == entries[0][1]
    assert kept[4] == {"topic_ids": {"b": "b1"}, "end_offsets": {"b": {"0": 1}}, "origin": {"b": {"0": 0}}}
    assert kept[3] == entries[2][1]  # written before ids were recorded: kept whole
    assert ledger.recorded_offsets(kept.items()) == {"a": {0: 80}, "b": {0: 1}}
