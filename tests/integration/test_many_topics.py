"""Many topics, one job: a pattern subscription writing a table per topic."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import replace

from confluent_kafka import Producer
from delta.tables import DeltaTable

from ingest.audit.per_table import status_per_table, verify_per_table
from ingest.batch.commit import ledger
from ingest.cli import main
from ingest.kafka.local_broker import create_topic
from ingest.spec.loader import load_file
from ingest.spec.model import DeadLetter, KafkaSource, Target, Trigger
from ingest.stream.query import start_query
from tests.integration.conftest import crash_at, ingest_run, table
from tests.integration.processes import wait_for, write_pipeline


def send(kafka, topic, uids, bad: int = 0):
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for uid in uids:
        body = json.dumps({"order_id": uid, "amount": 1.0, "ts": "2026-11-01T10:00:00"}).encode()
        producer.produce(topic, body, headers=[("message-id", uid)])
    for n in range(bad):
        producer.produce(topic, b"{not json", headers=[("message-id", f"{topic}-bad-{n}")])
    assert producer.flush(30) == 0


def per_topic(pipeline, kafka, tmp_path, prefix):
    """The `pipeline` fixture, subscribed to `<prefix>.*` with a table per topic."""
    return replace(
        pipeline, name="shop",
        source=replace(pipeline.source, kafka=KafkaSource(kafka.bootstrap, pattern=rf"{prefix}\..*")),
        target=Target(path=str(tmp_path / "tables" / "${topic}")),
        dead_letter=DeadLetter(path=str(tmp_path / "dead_letter" / "${topic}")),
        checkpoint=str(tmp_path / "checkpoints" / "shop"))


def uids_in(spark, path):
    return sorted(r._uid for r in table(spark, path).select("_uid").collect())


def rows_or_none(spark, path):
    from delta.tables import DeltaTable

    return table(spark, path).count() if DeltaTable.isDeltaTable(spark, path) else None


def test_a_pattern_writes_a_table_per_topic_and_a_new_topic_gets_its_own(spark, kafka, pipeline, tmp_path):
    prefix = f"shop{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.{name}" for name in ("orders", "refunds", "returns")]
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        send(kafka, topic, [f"{topic}-{i}" for i in range(4)], bad=1 if topic.endswith("refunds") else 0)
    shop = replace(per_topic(pipeline, kafka, tmp_path, prefix),
                   trigger=Trigger(available_now=False, processing_time="1 second"))
    tables = {t: str(tmp_path / "tables" / t.replace(".", "_")) for t in topics}

    reports = []
    query, router = start_query(spark, shop, on_report=reports.append)
    try:
        wait_for(lambda: all(rows_or_none(spark, path) == 4 for path in tables.values()), 600,
                 "the three tables")
        late = f"{prefix}.exchanges"  # the pattern matches a topic created mid-run
        create_topic(kafka.client_config(), late)
        send(kafka, late, [f"{late}-{i}" for i in range(3)])
        tables[late] = str(tmp_path / "tables" / late.replace(".", "_"))
        wait_for(lambda: rows_or_none(spark, tables[late]) == 3, 600, "the new topic's table")
    finally:
        query.stop()
    assert query.exception() is None

    for topic, path in tables.items():
        count = 3 if topic == late else 4
        assert uids_in(spark, path) == sorted(f"{topic}-{i}" for i in range(count))
        assert {r._topic for r in table(spark, path).select("_topic").collect()} == {topic}
    dead = str(tmp_path / "dead_letter" / f"{prefix}_refunds")
    assert [r._uid if "_uid" in r else r.stage for r in table(spark, dead).collect()] == ["decode"]
    assert not (tmp_path / "dead_letter" / f"{prefix}_orders").exists()

    # each table's commits: its own app id, only its own topic's offsets
    app_ids = set()
    for topic, path in tables.items():
        entries = ledger.history_entries(spark, path, False, "shop")
        assert entries, topic
        app_ids |= {entry["app_id"] for _, entry in entries}
        assert {t for _, entry in entries for t in entry["end_offsets"]} == {topic}
    assert len(app_ids) == len(tables)
    assert {r.pipeline.split(" -> ")[1] for r in reports} == set(tables.values())


def test_a_crash_between_two_tables_a_lost_checkpoint_and_verify_per_table(spark, kafka, tmp_path, monkeypatch,
                                                                          capsys):
    # `ingest run` and `ingest verify` as cli.main runs them, on this session; the crash is a
    # raise at the point, which leaves what a SIGKILL there leaves (ingest/batch/commit/faults.py)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("INGEST_FAULT_CONFIRM", "crash")
    prefix = f"crash{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.{name}" for name in ("a", "b", "c")]
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        send(kafka, topic, [f"{topic}-{i}" for i in range(5)], bad=1)
    pipeline_file = write_pipeline(
        tmp_path, topics[0], name="crashy",
        source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "pattern": rf"{prefix}\..*"}},
        target={"path": str(tmp_path / "tables" / "${topic}")},
        dead_letter={"path": str(tmp_path / "dead_letter" / "${topic}")},
        table_threads=1)  # tables in sorted order: a, then the crash
    tables = {t: str(tmp_path / "tables" / t.replace(".", "_")) for t in topics}

    loaded = load_file(pipeline_file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    crash_at(spark, loaded, "between_tables")  # batch 0's first table committed, the others not
    assert [rows_or_none(spark, tables[t]) for t in topics] == [5, None, None]
    checkpoint = tmp_path / "checkpoints" / "crashy"  # as a kill leaves it: batch 0 planned, not done
    assert (checkpoint / "offsets" / "0").exists() and not (checkpoint / "commits" / "0").exists()

    run_to_end(pipeline_file, capsys)
    for topic in topics:
        assert uids_in(spark, tables[topic]) == sorted(f"{topic}-{i}" for i in range(5))
    first = [entry for _, entry in ledger.history_entries(spark, tables[topics[0]], False, "crashy")]
    assert [entry["batch_id"] for entry in first] == [0]  # the replay was skipped by its txn id

    shutil.rmtree(tmp_path / "checkpoints")
    for topic in topics:  # new records and a retry of an old one
        send(kafka, topic, [f"{topic}-{i}" for i in range(4, 8)])
    output = run_to_end(pipeline_file, capsys)
    assert "resuming from the offsets recorded in the Delta log" in output
    for topic in topics:
        assert uids_in(spark, tables[topic]) == sorted(f"{topic}-{i}" for i in range(8))
        assert table(spark, str(tmp_path / "dead_letter" / topic.replace(".", "_"))).count() == 1

    audit = verify_per_table(spark, loaded)
    assert [(t.table, t.topics, t.report.ok, t.report.target_rows, t.report.dead_letters)
            for t in audit.tables] == [(tables[t], (t,), True, 8, 1) for t in topics]
    state = status_per_table(spark, loaded)
    assert [(t.topics, [p.delta_log for p in t.report.partitions]) for t in state.tables] == \
        [((t,), [10]) for t in topics]

    DeltaTable.forPath(spark, tables[topics[1]]).delete(f"_uid = '{topics[1]}-3'")
    code = main(["verify", str(pipeline_file)])
    found = capsys.readouterr()
    assert code == 1, found.out + found.err
    assert f"[{tables[topics[1]]}] topics {topics[1]}\nverify crashy: FAILED" in found.out
    assert found.out.count("verify crashy: OK") == 2



def run_to_end(pipeline_file, capsys) -> str:
    code, said = ingest_run(pipeline_file, capsys)
    assert code == 0, said[-3000:]
    return said
