"""on_data_loss: record: a range lost to retention is one dead letter of stage `lost`."""

from __future__ import annotations

from dataclasses import replace

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ingest.audit.verify import verify
from ingest.batch.lost_ranges import Gap, record_lost, skipped_ranges
from ingest.spec.model import Operations, Trigger
from ingest.stream.query import start_query
from ingest.stream.supervisor import Supervisor
from tests.integration.conftest import run_once
from tests.integration.processes import wait_for
from tests.integration.test_faults import send


def supervised_run(spark, pipeline) -> tuple[list, list[str]]:
    notes = []
    supervisor = Supervisor([pipeline], once=True, on_report=lambda report, progress: None, on_note=notes.append)
    supervisor.claim()
    supervisor.start(spark)
    return supervisor.wait(), notes


def test_lost_ranges_are_recorded_once_and_verify_accounts_for_the_rest(spark, kafka, topic, pipeline):
    pipeline = replace(pipeline, operations=Operations(on_data_loss="record"),
                       source=replace(pipeline.source, kafka=replace(pipeline.source.kafka, allow_data_loss=True)))
    send(kafka, topic, [f"a{i}" for i in range(20)])
    run_once(spark, pipeline, timeout=900)
    send(kafka, topic, [f"b{i}" for i in range(20)])
    admin = AdminClient(kafka.client_config())  # kept: a collected client never completes its futures
    deleted = admin.delete_records([TopicPartition(topic, 0, 30)])
    for future in deleted.values():
        future.result(timeout=60)

    outcomes, notes = supervised_run(spark, pipeline)
    assert [o.error for o in outcomes] == [None]
    assert any("offsets 20-29 (10 records) were deleted by retention" in note for note in notes), notes
    lost = spark.read.format("delta").load(pipeline.dead_letter.path).where("stage = 'lost'").collect()
    assert [(r._topic, r._partition, r._offset) for r in lost] == [(topic, 0, 20)]
    assert lost[0].reason.startswith("offsets 20-29 (10 records) were deleted by Kafka retention")
    assert lost[0].pipeline == "orders" and lost[0]._ingested_at is not None

    record_lost(spark, pipeline, [Gap(topic, 0, 20, 30)])  # found again (a crash, a lost checkpoint)
    assert spark.read.format("delta").load(pipeline.dead_letter.path).where("stage = 'lost'").count() == 1
    # Issue 27 point 7: found again grown (retention went on before a resume read it): widened
    record_lost(spark, pipeline, [Gap(topic, 0, 20, 35)])
    [grown] = spark.read.format("delta").load(pipeline.dead_letter.path).where("stage = 'lost'").collect()
    assert grown.reason.startswith("offsets 20-34 (15 records) were deleted"), grown.reason
    record_lost(spark, pipeline, [Gap(topic, 0, 20, 30)])  # the narrower one again changes nothing
    [kept] = spark.read.format("delta").load(pipeline.dead_letter.path).where("stage = 'lost'").collect()
    assert kept.reason == grown.reason
    # a batch that read from 25 on (earliest now 30: retention went on after the read) lost 20-24 only
    assert skipped_ranges(pipeline, {topic: {0: 20}}, {topic: {0: 40}}, {topic: {0: 25}}) == [Gap(topic, 0, 20, 25)]
    report = verify(spark, pipeline)
    assert report.ok, report
    assert report.target_rows == 30


def run_with_retention_after_batch_zero(spark, kafka, topic, pipeline, reports: list):
    """A running query (1-second trigger): batch 0 reads offsets 0-9; then 10 more are
    produced and retention deletes 10-14 before batch 1 reads them. (Deleting records Spark
    has already fetched would prove nothing: its consumer serves them from its buffer.)"""
    pipeline = replace(pipeline, trigger=Trigger(available_now=False, processing_time="1 second"))
    send(kafka, topic, [f"c{i}" for i in range(10)])
    admin = AdminClient(kafka.client_config())

    def on_report(report):
        reports.append(report)
        if report.batch_id == 0:
            send(kafka, topic, [f"c{i}" for i in range(10, 20)])
            for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
                future.result(timeout=60)

    query, _ = start_query(spark, pipeline, on_report=on_report)
    try:
        wait_for(lambda: query.exception() is not None or len(reports) >= 2, 600, "batch 1 or a failure")
        return query.exception()
    finally:
        query.stop()


def test_a_range_deleted_while_the_query_runs_is_recorded_before_the_batch_commits(spark, kafka, topic, pipeline):
    """Spark (failOnDataLoss off) skips to 15, and batch 1 records 10-14 as lost."""
    pipeline = replace(pipeline, operations=Operations(on_data_loss="record"),
                       source=replace(pipeline.source, kafka=replace(pipeline.source.kafka, allow_data_loss=True)))
    reports: list = []
    assert run_with_retention_after_batch_zero(spark, kafka, topic, pipeline, reports) is None

    assert [r.summary.read for r in reports[:2]] == [10, 5]
    lost = spark.read.format("delta").load(pipeline.dead_letter.path).where("stage = 'lost'").collect()
    assert [(r._topic, r._partition, r._offset) for r in lost] == [(topic, 0, 10)]
    assert lost[0].reason.startswith("offsets 10-14 (5 records) were deleted by Kafka retention")
    report = verify(spark, pipeline)
    assert report.ok, report
    assert report.target_rows == 15


def test_with_on_data_loss_fail_a_range_deleted_while_the_query_runs_stops_it(spark, kafka, topic, pipeline):
    reports: list = []
    error = run_with_retention_after_batch_zero(spark, kafka, topic, pipeline, reports)
    assert error is not None, "the query went on past lost offsets"
    assert "data may have been lost" in str(error)
    assert [r.batch_id for r in reports] == [0]
    assert spark.read.format("delta").load(pipeline.target.path).count() == 10


def test_a_topic_whose_whole_slice_was_deleted_while_the_query_runs_is_recorded(spark, kafka, pipeline, tmp_path):
    """Issue 27 point 3: a table per topic; only B's slice of batch 1 deleted, so no B record
    is in the batch (nothing routes to B's table), and its loss is still recorded."""
    import uuid

    from ingest.kafka.local_broker import create_topic
    from tests.integration.test_many_topics import per_topic

    prefix = f"loss{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}.a", f"{prefix}.b"
    for name in (a, b):
        create_topic(kafka.client_config(), name)
        send(kafka, name, [f"{name}-{i}" for i in range(5)])
    shop = per_topic(pipeline, kafka, tmp_path, prefix)
    shop = replace(shop, operations=Operations(on_data_loss="record"),
                   trigger=Trigger(available_now=False, processing_time="1 second"),
                   source=replace(shop.source, kafka=replace(shop.source.kafka, allow_data_loss=True)))
    admin = AdminClient(kafka.client_config())
    reports: list = []

    def on_report(report):
        reports.append(report)
        if [r.batch_id for r in reports] == [0, 0]:  # both tables have committed batch 0
            send(kafka, a, [f"{a}-{i}" for i in range(5, 10)])
            send(kafka, b, [f"{b}-{i}" for i in range(5, 10)])
            for future in admin.delete_records([TopicPartition(b, 0, 10)]).values():
                future.result(timeout=60)

    query, _ = start_query(spark, shop, on_report=on_report)
    try:
        wait_for(lambda: query.exception() is not None or any(r.batch_id >= 1 for r in reports), 600,
                 "batch 1 or a failure")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert [(r.batch_id, r.summary.read) for r in reports if r.batch_id == 1] == [(1, 5)]  # A's only
    dead = str(tmp_path / "dead_letter" / b.replace(".", "_"))
    lost = spark.read.format("delta").load(dead).where("stage = 'lost'").collect()
    assert [(r._topic, r._partition, r._offset) for r in lost] == [(b, 0, 5)]
    assert lost[0].reason.startswith("offsets 5-9 (5 records) were deleted by Kafka retention")
