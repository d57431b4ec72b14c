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
from ingest.spec.loader import to_document, to_yaml
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
