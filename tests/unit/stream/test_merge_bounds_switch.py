"""INGEST_MERGE_BOUNDS=off, the diagnostic that measures the naive MERGE (bench/)."""

import pytest

from ingest.stream.query import merge_bounds_on


@pytest.mark.parametrize("value, expected", [
    (None, True), ("on", True), ("off", False), ("OFF", False), (" off ", False), ("", True),
])
def test_only_off_turns_the_bounds_off(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("INGEST_MERGE_BOUNDS", raising=False)
    else:
        monkeypatch.setenv("INGEST_MERGE_BOUNDS", value)
    assert merge_bounds_on() is expected
