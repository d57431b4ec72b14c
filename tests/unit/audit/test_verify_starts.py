"""Where verify audits a `starting_offsets: latest` pipeline from: the first start the
ledger carries, else the checkpoint's own start, but never a start recovery seeded."""

from __future__ import annotations

import json

import pytest

from ingest.audit.scope import _starts
from ingest.batch.commit import ledger
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


@pytest.fixture
def latest(tmp_path):
    """A `latest` pipeline whose checkpoint (query id q2) started reading t/0 at 5."""
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "q2"}))
    (checkpoint / "sources" / "0" / "0").write_text('v1\n{"t":{"0":5}}')
    return Pipeline(name="p", source=Source(kafka=KafkaSource(bootstrap_servers="b:9092", topics=("t",),
                                                              starting_offsets="latest"),
                                            format="json", schema="v BIGINT"),
                    uid=Uid(header="id"), target=Target(path=str(tmp_path / "target")),
                    checkpoint=str(checkpoint), dead_letter=DeadLetter(path=str(tmp_path / "dead")))


def entry(query_id: str, end: int, **more) -> dict:
    return {"pipeline": "p", "app_id": ledger.app_id("p", query_id), "end_offsets": {"t": {"0": end}}, **more}


def test_a_start_recovery_seeded_is_not_taken_for_the_first_start(latest):
    """An earlier checkpoint's entries name the topic and record no origin (written before
    origins were): this checkpoint's start is where recovery resumed, not where the
    pipeline started; a loss before it must stay visible."""
    starts, notes = _starts(None, latest, [(3, entry("q1", 5))])
    assert starts == {}
    assert any("records from before it are audited too" in note for note in notes)


def test_the_checkpoints_own_start_when_only_it_has_written(latest):
    assert _starts(None, latest, [(4, entry("q2", 9)), (3, entry("q2", 7))]) == ({"t": {0: 5}}, ())
    assert _starts(None, latest, []) == ({"t": {0: 5}}, ())


def test_the_recorded_origin_wins(latest):
    assert _starts(None, latest, [(3, entry("q1", 5, origin={"t": {"0": 2}}))]) == ({"t": {0: 2}}, ())


def test_a_recreated_topic_takes_the_start_of_the_checkpoint_that_first_read_it(latest):
    """The old topic's entries say nothing about the new one (another topic id)."""
    entries = ledger.of_current_topics(
        [(4, entry("q2", 9, topic_ids={"t": "new"})),
         (3, entry("q1", 40, topic_ids={"t": "old"}, origin={"t": {"0": 30}}))], {"t": "new"})
    assert _starts(None, latest, entries) == ({"t": {0: 5}}, ())
