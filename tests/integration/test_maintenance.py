"""`ingest maintain` and maintenance.optimize_every against real Delta tables."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from ingest.cli import main
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import Maintenance, Operations, Target
from ingest.stream.maintenance import deleted_file_retention_s, files, maintain
from tests.integration.test_data_loss import supervised_run
from tests.integration.test_faults import send


def small_batches(pipeline, per_batch=10):
    kafka = replace(pipeline.source.kafka, max_offsets_per_trigger=per_batch)
    return replace(pipeline, source=replace(pipeline.source, kafka=kafka))


def test_optimize_every_compacts_between_batches_and_maintain_reports_files(
        spark, kafka, topic, pipeline, tmp_path, capsys, monkeypatch):
    maintenance = Maintenance(optimize_every_batches=3)
    pipeline = replace(small_batches(pipeline), operations=Operations(maintenance=maintenance))
    send(kafka, topic, [f"a{i}" for i in range(25)], partition=0)
    send(kafka, topic, [f"b{i}" for i in range(25)], partition=1)
    send(kafka, topic, ["bad"], partition=1, value=b"not json")

    outcomes, notes = supervised_run(spark, pipeline)
    assert [o.error for o in outcomes] == [None] and outcomes[0].batches >= 5
    compactions = [n for n in notes if ": target " in n and ": optimize: " in n]
    assert len(compactions) == outcomes[0].batches // 3, notes
    # maintenance runs beside the next batch, whose commit may land between the compaction and the count after it
    compacted = re.search(r": optimize: (\d+) files \(.*\) -> (\d+) files", compactions[0])
    assert compacted and int(compacted.group(2)) < int(compacted.group(1)), compactions
    target = Target(path=pipeline.target.path)
    assert spark.read.format("delta").load(pipeline.target.path).count() == 50

    # the table's own retention wins over a shorter vacuum_retain
    spark.sql(f"ALTER TABLE delta.`{pipeline.target.path}` SET TBLPROPERTIES "
              "('delta.deletedFileRetentionDuration' = 'interval 10 days')")
    assert deleted_file_retention_s(spark, target) == 10 * 24 * 3600
    before = files(spark, target)
    done = maintain(spark, pipeline, optimize=True, vacuum=True, zorder=True)
    assert [(d.table, d.action) for d in done] == [
        ("target", "optimize (Z-order by _uid)"), ("target", "vacuum"),
        ("dead letters", "optimize"), ("dead letters", "vacuum")]
    assert done[0].before == before and done[0].after.count == 1
    assert "240 hours" in done[1].detail  # 10 days, not vacuum_retain's 168 hours
    assert spark.read.format("delta").load(pipeline.target.path).count() == 50
    # time travel to before the compaction still works: VACUUM kept those files
    assert spark.read.format("delta").option("versionAsOf", 1).load(pipeline.target.path).count() > 0

    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    assert main(["maintain", str(file), "--optimize", "--json"]) == 0
    reported = json.loads(capsys.readouterr().out)
    assert [(r["table"], r["action"]) for r in reported] == [("target", "optimize"), ("dead letters", "optimize")]
    assert reported[0]["before"]["count"] == reported[0]["after"]["count"] == 1


def unwritable_table(path) -> None:
    """A Delta table of two small files (something to compact) that then came to need a
    writer feature no Delta release knows: every write to it, OPTIMIZE's included, fails."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for x in (1, 2):
        write_deltalake(str(path), pa.table({"x": [x]}), mode="append")
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                             "writerFeatures": ["ingestTestUnknownFeature"]}}
    (path / "_delta_log" / f"{2:020d}.json").write_text(json.dumps(protocol) + "\n")


def test_a_compaction_that_fails_does_not_fail_the_run(spark, kafka, topic, pipeline, tmp_path):
    # the dead letters (none in this run) are a table every compaction fails on
    pipeline = replace(small_batches(pipeline), operations=Operations(maintenance=Maintenance(
        optimize_every_batches=1)))
    unwritable_table(tmp_path / "dead_letter" / "orders")
    send(kafka, topic, [f"a{i}" for i in range(20)], partition=0)

    outcomes, notes = supervised_run(spark, pipeline)
    assert [o.error for o in outcomes] == [None] and outcomes[0].batches == 2, outcomes
    failed = [n for n in notes if "compaction failed, the run goes on" in n]
    assert len(failed) == 2, notes
    assert spark.read.format("delta").load(pipeline.target.path).count() == 20


def test_optimize_every_counts_batches_not_the_reports_of_a_table_per_topic(spark, kafka, pipeline, tmp_path):
    """Issue 57 point 8: with a table per topic each batch reports once per table; three
    topics and `optimize_every: 3` compacted every table three times per three batches."""
    import uuid

    from ingest.kafka.local_broker import create_topic
    from ingest.stream.supervisor import Supervisor
    from tests.integration.test_many_topics import per_topic
    from tests.integration.test_many_topics import send as send_to

    prefix = f"every{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.{name}" for name in ("orders", "refunds", "returns")]
    for topic in topics:
        create_topic(kafka.client_config(), topic, partitions=1)
        send_to(kafka, topic, [f"{topic}-{i}" for i in range(3)])
    shop = small_batches(replace(per_topic(pipeline, kafka, tmp_path, prefix), operations=Operations(
        maintenance=Maintenance(optimize_every_batches=3))), per_batch=3)
    notes: list[str] = []
    batches: list[int] = []
    supervisor = Supervisor([shop], once=True, on_report=lambda report, _: batches.append(report.batch_id),
                            on_note=notes.append)
    supervisor.claim()
    supervisor.start(spark)
    outcomes = supervisor.wait()
    assert [o.error for o in outcomes] == [None]
    assert sorted(set(batches)) == [0, 1, 2] and len(batches) == 9, batches  # every batch, every table
    compactions = [n for n in notes if ": target " in n and ": optimize: " in n]
    assert len(compactions) == 3, compactions  # once each table, after batch 2
    compacted = {n.split(": target ")[1].split(": optimize")[0] for n in compactions}
    assert compacted == {str(tmp_path / "tables" / t.replace(".", "_")) for t in topics}, compactions
