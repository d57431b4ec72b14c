"""`maintenance.optimize_every` as batches and as a duration (issue 57 point 8): the supervisor
hands the schedule every report, and a table per topic reports once per table each batch."""

from __future__ import annotations

from ingest.spec.model import Maintenance, Operations, Pipeline
from ingest.stream.maintenance import OptimizeSchedule


def schedule(maintenance: Maintenance, clock) -> OptimizeSchedule:
    pipeline = Pipeline.__new__(Pipeline)
    object.__setattr__(pipeline, "operations", Operations(maintenance=maintenance))
    return OptimizeSchedule(pipeline, clock)


def test_every_n_batches_counts_batch_ids_not_the_reports_of_each_table():
    every = schedule(Maintenance(optimize_every_batches=3), lambda: 0.0)
    due = [every.due(batch) for batch in (0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3)]
    assert due.count(True) == 1 and due.index(True) == 6  # batch 2's first report


def test_every_duration_queues_none_while_one_is_queued_or_running(monkeypatch):
    now = [0.0]
    every = schedule(Maintenance(optimize_every_seconds=60), lambda: now[0])
    now[0] = 61.0
    assert every.due(0) is True
    assert [every.due(batch) for batch in (1, 2, 3)] == [False, False, False]  # the first has not run yet
    monkeypatch.setattr("ingest.stream.maintenance.maintain", lambda *args, **kwargs: [])
    every.run(spark=None)  # a classic session: compaction runs on it, here on nothing at all
    assert every.due(4) is False  # the minute counts from the compaction's start
    now[0] = 122.0
    assert every.due(5) is True
