"""The retry of Delta write conflicts: which errors, how often, what it says."""

import logging

import pytest
from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    MetadataChangedException,
)

from ingest.batch.commit.conflicts import PersistentConflict, conflict_of, retry_conflicts


class Flaky:
    """Raises the given errors in turn, then returns 'committed'."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "committed"


def test_a_conflict_is_retried_with_growing_pauses_and_a_line_naming_it(caplog):
    pauses = []
    action = Flaky(ConcurrentDeleteReadException(message="files were removed"),
                   MetadataChangedException(message="metadata changed"))
    with caplog.at_level(logging.WARNING, logger="ingest.run"):
        assert retry_conflicts(action, "orders batch 3: MERGE", sleep=pauses.append) == "committed"
    assert action.calls == 3
    assert len(pauses) == 2 and pauses[1] > pauses[0] * 0.9
    assert "orders batch 3: MERGE: write conflict ConcurrentDeleteReadException (attempt 1 of 8)" in caplog.text
    assert "write conflict MetadataChangedException (attempt 2 of 8)" in caplog.text


def test_a_persistent_conflict_fails_naming_what_keeps_conflicting():
    action = Flaky(*[ConcurrentAppendException(message="files were added")] * 3)
    with pytest.raises(PersistentConflict) as raised:
        retry_conflicts(action, "orders batch 7: MERGE", attempts=3, sleep=lambda s: None)
    assert action.calls == 3
    assert "orders batch 7: MERGE: still conflicting with another writer after 3 attempts" in str(raised.value)
    assert "ConcurrentAppendException x3" in str(raised.value)


@pytest.mark.parametrize("error", [ValueError("bad"), RuntimeError("io.delta.exceptions.Other: x"),
                                   ConcurrentTransactionException(message="same app id")])
def test_anything_else_fails_at_once(error):
    action = Flaky(error)
    with pytest.raises(type(error)):
        retry_conflicts(action, "x", sleep=lambda s: None)
    assert action.calls == 1


def test_a_conflict_wrapped_in_another_error_is_found_by_its_jvm_class_name():
    wrapped = RuntimeError("Job aborted: io.delta.exceptions.ConcurrentAppendException: "
                           "[DELTA_CONCURRENT_APPEND] Files were added")
    assert conflict_of(wrapped).kind == "ConcurrentAppendException"
    assert conflict_of(RuntimeError("ConcurrentAppendException mentioned in passing")) is None
