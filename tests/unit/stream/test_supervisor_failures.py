"""One failing pipeline and the others (issue 20.8): the decision is the supervisor's,
so its queries are stand-ins here (no JVM); their own failure handling is Spark's."""

from __future__ import annotations

import threading
import time

from ingest.stream.supervisor import Supervisor, _Running
from tests.unit.spec.test_locations import pipeline as make_pipeline


class FakeQuery:
    def __init__(self, fails_after: int | None = None):
        self.polls, self.fails_after, self.stopped = 0, fails_after, False

    @property
    def isActive(self) -> bool:
        return not self.stopped and not self.failed

    @property
    def failed(self) -> bool:
        return self.fails_after is not None and self.polls >= self.fails_after

    def awaitTermination(self, seconds):
        self.polls += 1

    def exception(self):
        return RuntimeError("boom: the target cannot be written") if self.failed else None

    def stop(self):
        self.stopped = True


class FakeLease:
    def release(self):
        pass


def supervisor(fail_fast: bool, notes: list):
    pipelines = [make_pipeline("bad", "/t/bad", "/cp/bad"), make_pipeline("good", "/t/good", "/cp/good")]
    run = Supervisor(pipelines, once=False, on_report=lambda *_: None, on_note=notes.append, fail_fast=fail_fast)
    run.running = [_Running(p, FakeLease(), {}) for p in pipelines]
    run.running[0].query, run.running[1].query = FakeQuery(fails_after=2), FakeQuery()
    run.running[0].processor = run.running[1].processor = None
    return run


def until(condition, what: str, seconds: float = 30) -> None:
    """Bounded: if the supervisor's thread dies, the test fails instead of spinning."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.001)


def test_by_default_a_failed_pipeline_stops_alone_and_the_others_go_on():
    notes: list[str] = []
    run = supervisor(fail_fast=False, notes=notes)
    good = run.running[1].query
    waiter = threading.Thread(target=lambda: setattr(run, "outcomes", run.wait(poll_s=0.01)))
    waiter.start()
    until(lambda: notes, "note of the failed pipeline")
    polls = good.polls
    until(lambda: good.polls >= polls + 20, "polls of the good query")  # still waited on, not stopped
    assert not good.stopped and waiter.is_alive()
    run.request_stop()
    waiter.join(10)
    bad, fine = run.outcomes
    assert bad.error and "pipeline bad failed" in bad.error and "boom" in bad.error
    assert fine.error is None
    assert "bad is stopped; the other pipelines go on" in notes[0]


def test_fail_fast_stops_every_pipeline_at_the_first_failure():
    notes: list[str] = []
    run = supervisor(fail_fast=True, notes=notes)
    bad, fine = run.wait(poll_s=0.01)  # returns without a stop request
    assert bad.error and fine.error is None
    assert run.running[1].query.stopped and notes == []
