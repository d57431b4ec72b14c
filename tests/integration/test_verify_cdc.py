"""`verify` on change data capture (issues 27.1, 27.5, 28.3): the command and `ingest.verify`
take the same path, per table, and a correct table passes where a tampered one fails."""

from __future__ import annotations

import uuid
from dataclasses import replace

from delta.tables import DeltaTable

import ingest
from ingest.cli import main
from ingest.kafka.local_broker import create_topic
from ingest.spec import template
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import Cdc, DeadLetter, KafkaSource, Target, Uid
from tests.integration.conftest import DebeziumChanges, run_once

ROW = "id BIGINT, name STRING, tier STRING"


def write(pipeline, tmp_path, name: str) -> str:
    file = tmp_path / f"{name}.yaml"
    file.write_text(to_yaml(to_document(pipeline)))
    return str(file)


def verify_exit(file: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["verify", file])
    return code, capsys.readouterr().out


def per_topic_cdc(pipeline, kafka, tmp_path, topics):
    """Customer changes from each of `topics`, a table per topic, each topic's schema of its own."""
    prefix = topics[0].split(".")[0]
    return replace(
        pipeline, name="shop",
        source=replace(pipeline.source, schema=None, schemas={t: ROW for t in topics},
                       kafka=KafkaSource(kafka.bootstrap, pattern=rf"{prefix}\..*")),
        uid=Uid(field="id"), cdc=Cdc(key=("id",)),
        target=Target(path=str(tmp_path / "tables" / "${topic}"), mode="upsert"),
        dead_letter=DeadLetter(path=str(tmp_path / "dead_letter" / "${topic}")),
        checkpoint=str(tmp_path / "checkpoints" / "shop"))


def test_each_table_of_a_per_topic_cdc_pipeline_is_audited_by_command_and_api(
        spark, kafka, pipeline, tmp_path, capsys):
    prefix = f"cdc{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.{name}" for name in ("eu", "us")]
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        changes = DebeziumChanges(kafka, topic)
        changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
        changes.send("u", 1, 11, {"name": "ann", "tier": "b"})
        changes.send("c", 2, 12, {"name": "bob", "tier": "a"})
        changes.send("d", 2, 13)
        changes.flush()
    shop = per_topic_cdc(pipeline, kafka, tmp_path, topics)
    run_once(spark, shop, timeout=900)
    shop_file = write(shop, tmp_path, "shop")
    one = template.for_topic(shop, topics[0])  # a single-table cdc pipeline over the eu table
    one = replace(one, source=replace(one.source, schemas={},
                                      kafka=KafkaSource(kafka.bootstrap, topics=(topics[0],))))
    one_file = write(one, tmp_path, "one")

    code, out = verify_exit(shop_file, capsys)
    assert code == 0, out
    assert out.count("changes") >= 2 and "ATTENTION" not in out, out
    assert ingest.verify(spark, shop_file).ok
    single = ingest.verify(spark, one_file)
    assert single.ok, single
    assert (single.changes, single.keys, single.live, single.deleted) == (4, 2, 1, 1)

    us_table = str(tmp_path / "tables" / topics[1].replace(".", "_"))
    DeltaTable.forPath(spark, us_table).update("id = 1", {"tier": "'x'"})
    code, out = verify_exit(shop_file, capsys)
    assert code == 1, out
    assert '"tier":"x"' in out, out
    tampered = ingest.verify(spark, shop_file)
    assert not tampered.ok
    assert [t.report.ok for t in tampered.tables] == [True, False]


def customers(pipeline, **cdc):
    """The test pipeline, reading customer changes into an upsert with soft deletes."""
    return replace(pipeline, name="customers", source=replace(pipeline.source, schema=ROW),
                   uid=Uid(field="id"), cdc=Cdc(key=("id",), **cdc),
                   target=replace(pipeline.target, mode="upsert"))


def delete_below(kafka, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_config())  # kept: a collected client never completes its futures
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(timeout=60)


def test_expired_changes_are_not_judged_and_a_copied_row_is_found(spark, kafka, topic, pipeline, tmp_path, capsys):
    cdc = customers(pipeline)
    changes = DebeziumChanges(kafka, topic)
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})  # key 1's only change: expires below
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.send("u", 2, 12, {"name": "bob", "tier": "b"})
    changes.send("c", 3, 13, {"name": "cy", "tier": "a"}, partition=1)
    changes.flush()
    run_once(spark, cdc, timeout=900)
    delete_below(kafka, topic, 0, 2)  # retention: key 1's create and key 2's first change are gone

    report = ingest.verify(spark, write(cdc, tmp_path, "customers"))
    assert report.ok, report
    assert (report.changes, report.keys, report.differing, report.unaccounted) == (2, 2, 0, 0)

    rows = spark.read.format("delta").load(cdc.target.path)
    rows.where("id = 3").write.format("delta").mode("append").save(cdc.target.path)  # key 3 twice
    copied = ingest.verify(spark, write(cdc, tmp_path, "customers"))
    assert not copied.ok
    assert [(e.uid, e.found) for e in copied.examples] == [("3", "2 rows")]


def test_a_latest_cdc_pipeline_audits_from_its_start(spark, kafka, topic, pipeline):
    cdc = customers(pipeline)
    cdc = replace(cdc, source=replace(cdc.source, kafka=replace(cdc.source.kafka, starting_offsets="latest")))
    changes = DebeziumChanges(kafka, topic)
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})  # before the start: never read
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.flush()
    run_once(spark, cdc, timeout=900)  # starts at the end
    changes.send("u", 2, 12, {"name": "bob", "tier": "b"})
    changes.send("c", 3, 13, {"name": "cy", "tier": "a"})
    changes.flush()
    run_once(spark, cdc, timeout=900)

    from ingest.audit.dispatch import verify_pipeline

    report = verify_pipeline(spark, cdc)
    assert report.ok, report
    assert (report.before_start, report.changes, report.keys) == (2, 2, 2)


def test_changes_all_in_the_dead_letters_are_a_finding(spark, kafka, topic, pipeline, tmp_path, capsys):
    cdc = customers(pipeline, sequence="source.scn")  # not in a postgres envelope: every change a dead letter
    changes = DebeziumChanges(kafka, topic)
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("u", 1, 11, {"name": "ann", "tier": "b"})
    changes.flush()
    run_once(spark, cdc, timeout=900)

    code, out = verify_exit(write(cdc, tmp_path, "customers"), capsys)
    assert code == 1, out
    assert "every audited change (2) is in the dead letters" in out, out

    DeltaTable.forPath(spark, cdc.dead_letter.path).delete("_offset = 1")
    from ingest.audit.dispatch import verify_pipeline

    lost = verify_pipeline(spark, cdc)
    assert (lost.dead_letters, lost.failed, lost.unaccounted) == (1, 2, 1)
    assert "not in the dead letters" in lost.unaccounted_examples[0].why
