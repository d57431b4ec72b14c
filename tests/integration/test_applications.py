"""Past one driver (issue 55): several applications into one root, each a pattern over its share
of the topics and a checkpoint of its own; a table is written by one of them only
(`ingest.batch.commit.owner`)."""

from __future__ import annotations

import shutil
import uuid

from ingest.batch.commit import ledger
from ingest.cli import main
from ingest.kafka.local_broker import create_topic
from tests.integration.conftest import ingest_run, table
from tests.integration.processes import write_pipeline
from tests.integration.test_many_topics import send, uids_in

OWNER = "ingest.pipeline"  # the table property naming the pipeline that writes the table


def application(folder, name: str, pattern: str):
    """A pipeline file over `pattern`, a table per topic under the shared root, its own checkpoint."""
    return write_pipeline(folder, "unused", name=name,
                          source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "pattern": pattern}},
                          target={"path": str(folder / "tables" / "${topic}")},
                          dead_letter={"path": str(folder / "dead_letter" / "${topic}")})


def properties(spark, path) -> dict:
    return dict(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().properties or {})


def writers(spark, path) -> set[str]:
    """The pipelines whose commits the table's ledger holds."""
    entries = [ledger.parse_metadata(row.userMetadata)
               for row in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
    return {entry["pipeline"] for entry in entries if entry}


def test_applications_over_disjoint_patterns_share_a_root_and_one_that_overlaps_is_refused(
        spark, kafka, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    prefix = f"apps{uuid.uuid4().hex[:6]}"
    topics = {name: f"{prefix}.{name}" for name in ("a1", "a2", "b1", "c1")}
    for topic in topics.values():
        create_topic(kafka.client_config(), topic)
        send(kafka, topic, [f"{topic}-{i}" for i in range(5)])
    tables = {name: str(tmp_path / "tables" / topic.replace(".", "_")) for name, topic in topics.items()}
    shop_a = application(tmp_path, "shop_a", rf"{prefix}\.a.*")
    shop_b = application(tmp_path, "shop_b", rf"{prefix}\.b.*")

    # two applications over disjoint patterns into one root: each exact, each table its writer's
    for app in (shop_a, shop_b):
        code, said = ingest_run(app, capsys)
        assert code == 0, said[-3000:]
    owners = {"a1": "shop_a", "a2": "shop_a", "b1": "shop_b"}
    for name, owner in owners.items():
        assert uids_in(spark, tables[name]) == sorted(f"{topics[name]}-{i}" for i in range(5))
        assert writers(spark, tables[name]) == {owner}

    # a third whose pattern also matches a1 by mistake: its write of a1 is refused, naming both;
    # before its query starts (a1 is there already), and, with no broker check to list the
    # topics before it starts, in the batch that would write a1, before anything is written
    send(kafka, topics["a1"], [f"{topics['a1']}-{i}" for i in range(5, 8)])
    shop_c = application(tmp_path, "shop_c", rf"{prefix}\.(a1|c1)")
    refused = (f"shop_c: table {tables['a1']} is written by pipeline shop_a (table property {OWNER}), "
               f"not by shop_c; ")
    for options, when in [((), "the run stops before its query starts"),
                          (("--no-preflight",), "nothing of this batch was written")]:
        code, said = ingest_run(shop_c, capsys, options=options)
        assert code == 1, said[-3000:]
        assert refused + when in said, said[-3000:]
        assert uids_in(spark, tables["a1"]) == sorted(f"{topics['a1']}-{i}" for i in range(5))
        assert writers(spark, tables["a1"]) == {"shop_a"}
    assert main(["status", str(shop_c)]) == 1  # and its status says why
    assert (f"warning: the target {tables['a1']} is written by pipeline shop_a (table property {OWNER}), "
            "not by shop_c: `ingest run` refuses it") in capsys.readouterr().out

    # the owner goes on, even from a lost checkpoint: a1 holds each of its records once
    shutil.rmtree(tmp_path / "checkpoints" / "shop_a")
    code, said = ingest_run(shop_a, capsys)
    assert code == 0, said[-3000:]
    assert "resuming from the offsets recorded in the Delta log" in said
    rows = table(spark, tables["a1"])
    assert uids_in(spark, tables["a1"]) == sorted(f"{topics['a1']}-{i}" for i in range(8))
    assert rows.count() == 8
    assert uids_in(spark, tables["a2"]) == sorted(f"{topics['a2']}-{i}" for i in range(5))
    assert writers(spark, tables["a1"]) == {"shop_a"}
    # each table names its writer, from its first commit on (no commit of its own for it)
    for name, owner in {**owners, "c1": "shop_c"}.items():
        assert properties(spark, tables[name])[OWNER] == owner
        assert "SET TBLPROPERTIES" not in {r.operation for r in spark.sql(
            f"DESCRIBE HISTORY delta.`{tables[name]}`").collect()}
