"""Each MERGE's WHEN clauses render to the SQL `plan` shows and to the builder calls the run makes."""

import pytest

from ingest.batch.merge.clauses import When, apply, to_sql


class Recorder:
    """A stand-in DeltaMergeBuilder: each call returns a builder one call longer."""

    def __init__(self, calls=()):
        self.calls = tuple(calls)

    def __getattr__(self, name):
        return lambda **kwargs: Recorder((*self.calls, (name, kwargs)))


CLAUSES = [When(True, "delete", "s._op = 'd'"), When(True, "update", "s._op = 'u'", ("_op", "_offset")),
           When(True, "update *", "s.v > t.v"), When(False, "insert *")]


def test_the_clauses_as_sql():
    assert to_sql(CLAUSES) == ["WHEN MATCHED AND s._op = 'd' THEN DELETE",
                               "WHEN MATCHED AND s._op = 'u' THEN UPDATE SET _op = s._op, _offset = s._offset",
                               "WHEN MATCHED AND s.v > t.v THEN UPDATE SET *",
                               "WHEN NOT MATCHED THEN INSERT *"]


def test_the_same_clauses_as_builder_calls_in_order():
    assert apply(Recorder(), CLAUSES).calls == (
        ("whenMatchedDelete", {"condition": "s._op = 'd'"}),
        ("whenMatchedUpdate", {"condition": "s._op = 'u'", "set": {"_op": "s.`_op`", "_offset": "s.`_offset`"}}),
        ("whenMatchedUpdateAll", {"condition": "s.v > t.v"}),
        ("whenNotMatchedInsertAll", {"condition": None}),
    )


def test_a_clause_merge_cannot_run_is_refused():
    with pytest.raises(ValueError):
        apply(Recorder(), [When(False, "delete")])
