"""A batch's position from the checkpoint's files (no JVM, no broker: the topic ids given,
the target's txn version known), and when it asks the ledger's two checks."""

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingest.batch.commit import ledger, position
from ingest.batch.commit.position import QueryPosition
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


@dataclass(frozen=True)
class Summary:
    end_offsets: dict
    counts: dict


@pytest.fixture
def pipeline(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "metadata").write_text(json.dumps({"id": "q1"}))
    (checkpoint / "sources" / "0" / "0").write_text('v1\n{"a":{"0":0},"b":{"0":0}}')
    return Pipeline(name="p", source=Source(kafka=KafkaSource("b:9092", ("a", "b")), format="json",
                                            schema="v BIGINT"),
                    uid=Uid(header="id"), target=Target(path=str(tmp_path / "target")),
                    checkpoint=str(checkpoint), dead_letter=DeadLetter(path=str(tmp_path / "dead")))


def plan(pipeline: Pipeline, batch_id: int, offsets: dict) -> None:
    text = f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}'
    (Path(pipeline.checkpoint) / "offsets" / str(batch_id)).write_text(text)


def known(pipeline: Pipeline, table_key=None, recorded_version=None) -> QueryPosition:
    return QueryPosition(pipeline, table_key, recorded_version=recorded_version,
                         topic_ids={"a": "id-a", "b": "id-b"})


def test_the_planned_range_every_partition_and_the_txn_it_gives(pipeline):
    plan(pipeline, 0, {"a": {"0": 3}, "b": {"0": 2}})
    batch = known(pipeline).batch(None, 0, Summary({"a": {0: 3}}, {"read": 3}))
    assert (batch.start, batch.end) == ({"a": {0: 0}, "b": {0: 0}}, {"a": {0: 3}, "b": {0: 2}})
    assert batch.topic_ids == {"a": "id-a", "b": "id-b"}
    entry = json.loads(batch.txn.metadata)
    assert (batch.txn.app_id, batch.txn.version) == (ledger.app_id("p", "q1"), 0)
    assert entry["start_offsets"] == {"a": {"0": 0}, "b": {"0": 0}}
    assert entry["end_offsets"] == {"a": {"0": 3}, "b": {"0": 2}}
    assert entry["counts"] == {"read": 3}


def test_the_next_batch_starts_where_the_last_was_planned_to_end(pipeline):
    query = known(pipeline)
    plan(pipeline, 0, {"a": {"0": 3}, "b": {"0": 2}})
    query.batch(None, 0, Summary({"a": {0: 3}}, {}))
    plan(pipeline, 1, {"a": {"0": 5}, "b": {"0": 2}})
    (Path(pipeline.checkpoint) / "offsets" / "0").unlink()  # purged: the start is the one kept
    batch = query.batch(None, 1, Summary({"a": {0: 5}}, {}))
    assert (batch.start, batch.end) == ({"a": {0: 3}, "b": {0: 2}}, {"a": {0: 5}, "b": {0: 2}})


def test_without_an_offset_log_the_records_own_end_and_no_start(pipeline):
    batch = known(pipeline).batch(None, 4, Summary({"a": {0: 9}}, {}))
    assert (batch.start, batch.end) == (None, {"a": {0: 9}})


def test_one_table_of_a_per_topic_pipeline_keeps_its_own_topics(pipeline):
    plan(pipeline, 0, {"a": {"0": 3}, "b": {"0": 2}})
    batch = known(pipeline, table_key="t_a").batch(None, 0, Summary({"a": {0: 3}}, {}))
    assert (batch.start, batch.end, batch.topic_ids) == ({"a": {0: 0}}, {"a": {0: 3}}, {"a": "id-a"})
    assert batch.txn.app_id == ledger.app_id("p", "q1", "t_a")


def test_no_query_id_in_the_checkpoint_stops_the_batch(pipeline):
    (Path(pipeline.checkpoint) / "metadata").unlink()
    with pytest.raises(RuntimeError, match="no query id"):
        known(pipeline).batch(None, 0, Summary({"a": {0: 1}}, {}))


@pytest.fixture
def asked(monkeypatch) -> list:
    calls: list = []
    monkeypatch.setattr(ledger, "check_replay", lambda *args: calls.append(("replay", args[4].version)))
    monkeypatch.setattr(ledger, "check_skipped", lambda *args: calls.append(("skipped", args[4].version)))
    return calls


def test_a_batch_id_the_target_had_committed_is_checked_for_replay_only(pipeline, asked):
    query = known(pipeline, recorded_version=1)
    for batch_id in (1, 2):
        batch = query.batch(None, batch_id, Summary({"a": {0: batch_id}}, {}))
        batch.check_replay(None)
        batch.check_skipped(None, skipped=True)
    assert asked == [("replay", 1), ("skipped", 2)]


def test_a_merge_that_was_not_skipped_needs_no_check(pipeline, asked):
    batch = known(pipeline).batch(None, 0, Summary({"a": {0: 1}}, {}))
    batch.check_replay(None)
    batch.check_skipped(None, skipped=False)
    assert asked == []
    batch.check_skipped(None, skipped=True)  # a target with no txn version: any skip is another copy's
    assert asked == [("skipped", 0)]


def test_planned_range_reuses_the_last_end_only_for_the_batch_after_it(pipeline):
    plan(pipeline, 2, {"a": {"0": 7}})
    assert position.planned_range(None, pipeline.checkpoint, 3, last=(2, {"a": {0: 6}})) == ({"a": {0: 6}}, None)
    assert position.planned_range(None, pipeline.checkpoint, 3, last=(1, {"a": {0: 6}})) == ({"a": {0: 7}}, None)
