"""Delta table properties (issue 56): `target.properties` and `dead_letter.properties`
at creation, deletion vectors where the MERGE updates, the change data feed of a cdc
target read downstream, and `plan` and `run` on a table that exists. Real broker,
Spark and Delta; delta-rs (`deltalake`) as the second reader."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from delta.tables import DeltaTable
from deltalake import DeltaTable as RustTable
from deltalake import QueryBuilder

import ingest
from ingest.batch.commit import faults
from ingest.batch.commit.owner import OWNER
from ingest.cli import main
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import Cdc, Uid, frozen_map
from ingest.stream.maintenance import maintain
from tests.integration.conftest import DebeziumChanges, crash_at, ingest_run, run_once, table
from tests.integration.processes import write_pipeline

ROW = "id BIGINT, name STRING, tier STRING"
FEED = "delta.enableChangeDataFeed"
VECTORS = "delta.enableDeletionVectors"
CHANGE_ORDER = {"insert": 0, "update_preimage": 1, "update_postimage": 2, "delete": 3}


def properties(spark, path) -> dict:
    return dict(DeltaTable.forPath(spark, str(path)).detail().first().properties or {})


def live_vectors(path) -> int:
    """Files of the table's current version that carry a deletion vector, from the log's
    JSON commits (every commit is still there: nothing here cleans the log). A commit that
    gives a file a vector removes the file as it was and adds it again, same path: its
    removes go first."""
    live: dict[str, bool] = {}
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        for action in actions:
            if "remove" in action:
                live.pop(action["remove"]["path"], None)
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"].get("deletionVector") is not None
    return sum(live.values())


def change_feed(spark, path) -> dict[int, list[str]]:
    """Each key's changes from `table_changes_by_path`, in commit order."""
    rows = spark.sql(f"SELECT id, _change_type, _commit_version FROM table_changes_by_path('{path}', 0)").collect()
    ordered = sorted(rows, key=lambda r: (r.id, r._commit_version, CHANGE_ORDER[r._change_type]))
    feed: dict[int, list[str]] = {}
    for row in ordered:
        feed.setdefault(row.id, []).append(row._change_type)
    return feed


def contents(spark, path) -> list[tuple]:
    return sorted(tuple(r) for r in table(spark, str(path)).select("id", "tier").collect())


def test_a_cdc_target_with_deletion_vectors_and_change_feed_through_a_crash_verify_and_maintain(
        spark, kafka, topic, pipeline, tmp_path, monkeypatch):
    changes = DebeziumChanges(kafka, topic)
    cdc = replace(pipeline, name="customers", source=replace(pipeline.source, schema=ROW),
                  uid=Uid(field="id"), cdc=Cdc(key=("id",)),
                  target=replace(pipeline.target, mode="upsert", deletes="hard",
                                 properties=frozen_map({FEED: "true"})),
                  dead_letter=replace(pipeline.dead_letter, properties=frozen_map(
                      {"delta.logRetentionDuration": "interval 60 days"})))
    path = cdc.target.path
    for key in range(1, 7):
        changes.send("c", key, 10 + key, {"name": f"n{key}", "tier": "a"})
    changes.raw(b'{"oops', 99)
    changes.flush()
    run_once(spark, cdc, timeout=900)
    changes.send("u", 1, 20, {"name": "n1", "tier": "b"})
    changes.send("d", 2, 21)
    changes.send("u", 3, 22, {"name": "n3", "tier": "c"})
    changes.flush()
    run_once(spark, cdc, timeout=900)

    # at creation: ingest's own, then the pipeline's; the delete log keeps ingest's alone
    assert properties(spark, path) == {"delta.checkpointInterval": "100", VECTORS: "true", FEED: "true",
                                       OWNER: "customers"}
    assert properties(spark, cdc.dead_letter.path) == {"delta.logRetentionDuration": "interval 60 days"}
    # the delete log: not checkpointed beside the batches, so Delta's own checkpoint interval
    assert properties(spark, path + "_deletes") == {VECTORS: "false"}
    merge = DeltaTable.forPath(spark, path).history(1).first()
    assert merge.operation == "MERGE"
    assert int(merge.operationMetrics["numTargetDeletionVectorsAdded"]) >= 1
    assert merge.operationMetrics["numTargetFilesRemoved"] == "0"  # vectors, not files written again
    assert live_vectors(path) >= 1

    expected = [(1, "b"), (3, "c"), (4, "a"), (5, "a"), (6, "a")]
    assert contents(spark, path) == expected
    feed = change_feed(spark, path)
    assert feed[1] == feed[3] == ["insert", "update_preimage", "update_postimage"]
    assert feed[2] == ["insert", "delete"]
    assert feed[4] == feed[5] == feed[6] == ["insert"]

    # a crash between the batch's commits: its replay adds no commit, no change row, no vector
    changes.send("u", 4, 30, {"name": "n4", "tier": "d"})
    changes.send("d", 5, 31)
    changes.flush()
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    crash_at(spark, cdc, "after_target_commit", batch=2)
    version, feed, vectors = (DeltaTable.forPath(spark, path).history(1).first().version,
                              change_feed(spark, path), live_vectors(path))
    assert feed[4] == ["insert", "update_preimage", "update_postimage"] and feed[5] == ["insert", "delete"]
    run_once(spark, cdc, timeout=900)
    assert DeltaTable.forPath(spark, path).history(1).first().version == version
    assert (change_feed(spark, path), live_vectors(path)) == (feed, vectors)
    expected = [(1, "b"), (3, "c"), (4, "d"), (6, "a")]
    assert contents(spark, path) == expected

    # delta-rs reads the vectors through its SQL engine; its pyarrow reader refuses the table
    read = pa.table(QueryBuilder().register("t", RustTable(path)).execute("SELECT id, tier FROM t").read_all())
    assert sorted((r["id"], r["tier"]) for r in read.to_pylist()) == expected
    with pytest.raises(Exception, match="deletionVectors"):
        RustTable(path).to_pyarrow_table()

    file = tmp_path / "customers.yaml"
    file.write_text(to_yaml(to_document(cdc)))
    assert ingest.verify(spark, file).ok
    assert ingest.status(spark, file).table_exists
    done = maintain(spark, cdc, optimize=True, vacuum=False)
    assert [(one.table, one.action) for one in done][:2] == [("target", "purge deletion vectors"),
                                                             ("target", "optimize")]
    assert "purge deletion vectors" not in [one.action for one in done if one.table != "target"]
    assert live_vectors(path) == 0 and contents(spark, path) == expected
    DeltaTable.forPath(spark, path).update("id = 3", {"tier": "'x'"})  # a tampering, as a vector
    assert live_vectors(path) == 1
    tampered = ingest.verify(spark, file)
    assert not tampered.ok and tampered.differing == 1


def write(file: Path, document: dict) -> None:
    file.write_text(yaml.safe_dump(document, sort_keys=False))


def test_plan_shows_and_run_applies_the_safe_changes_and_refuses_the_others(spark, kafka, sender, topic,
                                                                          tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    for n in range(3):
        sender.send({"order_id": f"o{n}", "amount": 1.0}, uid=f"u{n}")
    sender.flush()
    file = write_pipeline(tmp_path, topic, name="props")
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    path = tmp_path / "tables" / "props"
    # insert_only: no deletion vectors; the table names the pipeline that writes it
    assert properties(spark, path) == {"delta.checkpointInterval": "100", VECTORS: "false", OWNER: "props"}
    document = yaml.safe_load(file.read_text())

    document["target"]["properties"] = {FEED: "true", "delta.logRetentionDuration": "interval 45 days"}
    write(file, document)
    assert main(["plan", str(file)]) == 0
    shown = capsys.readouterr().out
    assert f"target {path}: {FEED}: not set -> 'true' (run sets it)" in shown, shown
    assert properties(spark, path) == {"delta.checkpointInterval": "100", VECTORS: "false",
                                       OWNER: "props"}  # plan changes nothing
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    assert f"{FEED} set to 'true' (was None)" in said
    assert properties(spark, path) == {"delta.checkpointInterval": "100", VECTORS: "false", FEED: "true",
                                       "delta.logRetentionDuration": "interval 45 days", OWNER: "props"}

    document["target"]["properties"]["delta.columnMapping.mode"] = "name"
    document["target"]["properties"][VECTORS] = "true"
    write(file, document)
    assert main(["plan", str(file)]) == 0
    shown = capsys.readouterr().out
    assert "delta.columnMapping.mode: not set -> 'name' (refused: not safe to change" in shown, shown
    assert f"{VECTORS}: 'false' -> 'true' (run sets it)" in shown, shown
    code, said = ingest_run(file, capsys)
    assert code == 2, said[-3000:]
    line = next(n for n, text in enumerate(file.read_text().splitlines(), 1) if "delta.columnMapping.mode" in text)
    assert f"{file}:{line}: target.properties.delta.columnMapping.mode: target {path} has delta.columnMapping.mode " \
        "not set, the pipeline says 'name', and it is not safe to change" in said, said[-3000:]
    assert properties(spark, path)[VECTORS] == "false"  # refused before anything changed
