"""on_data_loss: record: a range lost to retention is one dead letter of stage `lost`."""

from __future__ import annotations

from dataclasses import replace

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from ingest.audit.verify import verify
from ingest.run.data_loss import record_lost
from ingest.run.recovery import Gap
from ingest.run.supervisor import Supervisor
from ingest.spec.model import Operations
from tests.integration.conftest import run_once
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
    report = verify(spark, pipeline)
    assert report.ok, report
    assert report.target_rows == 30
