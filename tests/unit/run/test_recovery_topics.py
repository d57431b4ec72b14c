"""A topic recreated under the same name is told apart by its id."""

from __future__ import annotations

from ingest.run import recovery


def test_the_newest_entry_naming_a_topic_gives_its_recorded_id():
    entries = [(5, {"topic_ids": {"a": "new"}, "end_offsets": {"a": {"0": 3}}}),
               (4, {"topic_ids": {"a": "old", "b": "b1"}, "end_offsets": {"a": {"0": 90}, "b": {"0": 1}}}),
               (3, {"end_offsets": {"a": {"0": 80}}})]
    assert recovery._recreated(entries, {"a": "new", "b": "b1"}) == {}
    assert recovery._recreated(entries, {"a": "newer", "b": "b1"}) == {"a": ("new", "newer")}
    assert recovery._recreated(entries, {"a": "new", "b": "b2"}) == {"b": ("b1", "b2")}


def test_a_recreated_topics_offsets_are_left_out():
    entry = {"end_offsets": {"a": {"0": 90}, "b": {"0": 1}}}
    assert recovery._without(entry, {"a"})["end_offsets"] == {"b": {"0": 1}}
