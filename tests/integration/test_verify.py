"""`ingest verify` against a real broker, Spark and Delta: clean runs pass, tampered tables fail."""

import json
import time
from dataclasses import replace

from delta.tables import DeltaTable

from ingest.audit.verify import Duplicate, Missing, verify
from ingest.cli import main
from ingest.kafka import admin
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import KafkaSource, Transform
from tests.integration.conftest import run_once


def order(i, amount=1.0):
    return {"order_id": f"o{i}", "customer": str(i), "amount": amount, "ts": "2026-11-01T10:00:00"}


def with_transform(pipeline):
    """A cast that fails for some records (transform dead letters) and a filter."""
    return replace(pipeline, transform=Transform(
        select=("*", "CAST(customer AS INT) AS customer_no"), where="amount > 0"))


def send_mixed(sender):
    """7 records on 2 partitions: 3 orders (one sent twice), a decode failure, a
    transform failure, a filtered record; plus an aborted transaction."""
    sender.send(order(1), uid="u-1")
    sender.send(order(2), uid="u-2", partition=1)
    sender.send(order(1), uid="u-1", partition=1)  # a producer retry: same uid, new offset
    sender.send(b"{not json", uid="bad-json")
    sender.send({**order(4), "customer": "four"}, uid="bad-cast", partition=1)
    sender.send(order(5, amount=-1.0), uid="filtered")
    sender.send(order(3), uid="u-3")
    sender.flush()
    sender.transaction([(order(9), "aborted")], commit=False, partition=1)


def test_a_clean_run_verifies_and_records_not_yet_consumed_are_not_missing(spark, sender, pipeline):
    pipeline = with_transform(pipeline)
    send_mixed(sender)
    run_once(spark, pipeline)

    report = verify(spark, pipeline)
    assert report.ok, report
    assert (report.topic_records, report.not_yet_ingested, report.before_start) == (7, 0, 0)
    assert (report.unique_uids, report.target_rows) == (3, 3)
    assert (report.dead_letters, report.filtered) == (2, 1)
    assert (report.duplicates, report.missing, report.unaccounted) == (0, 0, 0)

    sender.send(order(6), uid="u-6")  # the pipeline lags: not run again
    sender.send(b"also bad", uid="bad-2", partition=1)
    sender.flush()
    lagging = verify(spark, pipeline)
    assert lagging.ok, lagging
    assert (lagging.topic_records, lagging.not_yet_ingested, lagging.missing) == (9, 2, 0)


def test_tampered_tables_are_found_and_exit_1(spark, sender, pipeline, tmp_path, capsys):
    pipeline = with_transform(pipeline)
    send_mixed(sender)
    run_once(spark, pipeline)
    target = DeltaTable.forPath(spark, pipeline.target.path)
    target.delete("_uid = 'u-1'")  # both copies of u-1 become missing
    spark.read.format("delta").load(pipeline.target.path).where("_uid = 'u-2'") \
        .write.format("delta").mode("append").save(pipeline.target.path)  # u-2 twice
    DeltaTable.forPath(spark, pipeline.dead_letter.path).delete("stage = 'transform'")

    report = verify(spark, pipeline)
    topic = sender.topic
    assert not report.ok
    assert (report.duplicates, report.missing, report.unaccounted) == (1, 1, 3)
    assert report.duplicate_examples == (Duplicate("u-2", 2),)
    assert report.missing_examples == (Missing("u-1", topic, 0, 0),)
    found = [(e.topic, e.partition, e.offset, e.why) for e in report.unaccounted_examples]
    not_in_target = "uid u-1 is not in the target"
    assert found[:2] == [(topic, 0, 0, not_in_target), (topic, 1, 1, not_in_target)]
    assert found[2][:3] == (topic, 1, 2)
    assert found[2][3].startswith("a transform failure (") and "not in the dead letters" in found[2][3]

    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    assert main(["verify", str(file), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert (printed["ok"], printed["missing"], printed["duplicates"]) == (False, 1, 1)
    assert main(["verify", str(file)]) == 1
    text = capsys.readouterr().out
    assert "missing uids" in text and "u-1 (first at" in text and "u-2: 2 rows" in text


def test_records_before_a_latest_start_are_not_audited(spark, sender, pipeline, tmp_path, capsys):
    sender.send(order(1), uid="before-1")
    sender.send(order(2), uid="before-2", partition=1)
    sender.flush()
    kafka = replace(pipeline.source.kafka, starting_offsets="latest")
    pipeline = replace(pipeline, source=replace(pipeline.source, kafka=kafka))
    run_once(spark, pipeline)  # starts at the end: nothing to read, but the start is recorded
    sender.send(order(3), uid="after-3")
    sender.flush()
    run_once(spark, pipeline)

    report = verify(spark, pipeline)
    assert report.ok, report
    assert (report.topic_records, report.before_start, report.unique_uids, report.target_rows) == (3, 2, 1, 1)

    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    assert main(["verify", str(file)]) == 0
    assert "OK" in capsys.readouterr().out


def test_an_unreachable_broker_is_a_clear_error(spark, pipeline, tmp_path, capsys):
    kafka = KafkaSource(bootstrap_servers="127.0.0.1:1", topics=pipeline.source.kafka.topics)
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(replace(pipeline, source=replace(pipeline.source, kafka=kafka)))))
    started = time.monotonic()
    assert main(["verify", str(file)]) == 1
    assert "127.0.0.1:1 did not answer" in capsys.readouterr().err
    # nothing listens there: said after admin's grace for a starting broker, not its 15 s timeout
    assert time.monotonic() - started < admin.DEFAULT_TIMEOUT_S / 2
