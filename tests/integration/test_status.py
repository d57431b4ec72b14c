"""`ingest status`: Kafka, the checkpoint and the Delta log side by side, and what their
disagreements mean, against a real broker, Spark and Delta."""

import json
import shutil
from pathlib import Path

from ingest.audit.status import WARNING, status
from ingest.cli import main
from ingest.spec.document import to_document, to_yaml
from tests.integration.conftest import run_once


def order(i):
    return {"order_id": f"o{i}", "customer": "c", "amount": 1.0, "ts": "2026-11-01T10:00:00"}


def offsets(report):
    """(topic-less) partition -> (earliest, end, checkpoint, delta log, next offset, lag)."""
    return {p.partition: (p.earliest, p.end, p.checkpoint, p.delta_log, p.next_offset, p.lag)
            for p in report.partitions}


def texts(report, level=None):
    return [f.text for f in report.findings if level is None or f.level == level]


def pipeline_file(pipeline, folder: Path) -> str:
    file = folder / "orders.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    return str(file)


def test_before_the_first_run(spark, sender, pipeline, tmp_path, capsys):
    sender.send(order(1), uid="u-1")
    sender.send(order(2), uid="u-2", partition=1)
    sender.send(order(3), uid="u-3", partition=1)
    sender.flush()

    report = status(spark, pipeline)
    assert report.ok
    assert offsets(report) == {0: (0, 1, None, None, 0, 1), 1: (0, 2, None, None, 0, 2)}
    assert (report.table_exists, report.last_batch, report.last_committed_batch) == (False, None, None)
    assert texts(report) == ["not started yet: the first run reads from earliest"]

    assert main(["status", pipeline_file(pipeline, tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not started yet" in out and f"{sender.topic}/1" in out


def test_the_three_witnesses_and_their_disagreements(spark, sender, pipeline, tmp_path, capsys):
    sender.send(order(1), uid="u-1")
    sender.send(b"{not json", uid="bad-1")
    sender.send(order(2), uid="u-2", partition=1)
    sender.flush()
    sender.transaction([(order(9), "aborted")], commit=False, partition=1)  # offsets 1-2 on partition 1
    run_once(spark, pipeline)
    sender.send(order(3), uid="u-3")
    sender.send(b"bad again", uid="bad-2")
    sender.flush()
    run_once(spark, pipeline)

    report = status(spark, pipeline)
    # partition 1: Spark's offset passed the aborted records and the marker, and the ledger
    # records the range Spark planned, so the Delta log says the same
    assert offsets(report) == {0: (0, 4, 4, 4, 4, 0), 1: (0, 3, 3, 3, 3, 0)}
    assert report.ok and texts(report) == []
    last = report.last_batch
    assert (last.batch_id, last.source_rows, last.inserted, last.updated, last.dead_letters) == (1, 1, 1, 0, 1)

    sender.send(order(4), uid="u-4")
    sender.send(order(5), uid="u-5")
    sender.flush()
    assert offsets(status(spark, pipeline))[0] == (0, 6, 4, 4, 4, 2)

    # a crash after batch 1's Delta commit, before Spark's checkpoint commit
    checkpoint = Path(pipeline.checkpoint)
    (checkpoint / "commits" / "1").unlink()
    report = status(spark, pipeline)
    assert report.ok
    assert offsets(report)[0] == (0, 6, 2, 4, 2, 4)
    assert any("the checkpoint (2) is behind the Delta log (4)" in t and "no-op" in t for t in texts(report))
    assert any("batch 1 is planned" in t for t in texts(report))

    # the checkpoint lost: the next run resumes from the Delta log
    shutil.move(checkpoint, tmp_path / "saved-checkpoint")
    report = status(spark, pipeline)
    assert offsets(report) == {0: (0, 6, None, 4, 4, 2), 1: (0, 3, None, 3, 3, 0)}
    assert any(t.startswith("no checkpoint at") for t in texts(report))
    shutil.move(tmp_path / "saved-checkpoint", checkpoint)

    # the tables replaced behind the pipeline's back: records the checkpoint passed are not in them
    schema = spark.read.format("delta").load(pipeline.target.path).schema
    shutil.rmtree(pipeline.target.path)
    shutil.rmtree(pipeline.dead_letter.path)
    spark.createDataFrame([], schema).write.format("delta").save(pipeline.target.path)
    report = status(spark, pipeline)
    assert not report.ok
    warned = sorted(texts(report, WARNING))
    assert len(warned) == 2
    assert warned[0].startswith(f"{sender.topic}/0: the Delta log (none) is behind the checkpoint (2) ")
    assert "offsets 0-1 hold records" in warned[0] and "run ingest verify" in warned[0]
    assert warned[1].startswith(f"{sender.topic}/1: the Delta log (none) is behind the checkpoint (3)")

    file = pipeline_file(pipeline, tmp_path)
    assert main(["status", file, "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"] is False and printed["partitions"][0]["checkpoint"] == 2
    assert main(["status", file]) == 1
    assert "warning:" in capsys.readouterr().out
