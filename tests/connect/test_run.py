"""Pipelines on Spark Connect, end to end: the broker, a Connect server in this process,
the batch function in the server's Python worker, Delta through SQL."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

import ingest
from tests.integration.processes import write_pipeline


@pytest.fixture
def bootstrap(kafka, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)  # the pipeline files read ${KAFKA_BOOTSTRAP}
    return kafka.bootstrap


def send(kafka, topic, records) -> None:
    """(uid, body, partition) each; a body that is bytes goes as it is."""
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "linger.ms": 20})
    for uid, body, partition in records:
        value = body if isinstance(body, bytes) else json.dumps(body).encode()
        producer.produce(topic, value, partition=partition, headers=[("message-id", uid)])
    assert producer.flush(60) == 0


def orders(count: int, amount: float = 1.0) -> list:
    return [(f"u{i:04d}", {"order_id": f"o{i}", "amount": amount, "ts": "2026-11-01T10:00:00"}, i % 2)
            for i in range(count)]


def rows(spark, path) -> dict:
    return {r._uid: r for r in spark.read.format("delta").load(str(path)).collect()}


def latest_version(spark, path) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0].version


def test_insert_only_json_with_retries_and_a_bad_record(connect_spark, kafka, topic, tmp_path, bootstrap):
    retried = orders(4)[:2]  # the producer's retries: the same uids again, at new offsets
    send(kafka, topic, orders(10) + retried + [("bad", b"{oops", 0)])
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_orders")

    [outcome] = ingest.run(connect_spark, pipeline_file, once=True)

    assert (outcome.pipeline, outcome.error) == ("connect_orders", None)
    assert outcome.batches >= 1
    target = rows(connect_spark, tmp_path / "tables" / "connect_orders")
    assert sorted(target) == [f"u{i:04d}" for i in range(10)]
    dead = connect_spark.read.format("delta").load(str(tmp_path / "dead_letter" / "connect_orders")).collect()
    assert [(d.stage, d.value) for d in dead] == [("decode", b"{oops")]

    version = latest_version(connect_spark, tmp_path / "tables" / "connect_orders")
    [again] = ingest.run(connect_spark, pipeline_file, once=True)  # nothing new: nothing changes
    assert again.error is None and again.batches == 0
    assert latest_version(connect_spark, tmp_path / "tables" / "connect_orders") == version
    assert rows(connect_spark, tmp_path / "tables" / "connect_orders").keys() == target.keys()
    audit = ingest.verify(connect_spark, pipeline_file)
    assert (audit.ok, audit.target_rows, audit.dead_letters, audit.duplicates) == (True, 10, 1, 0)


def test_the_python_api_reports_each_batch_from_the_ledger(connect_spark, kafka, topic, tmp_path, bootstrap):
    send(kafka, topic, orders(6) + [("bad", b"{oops", 1)])
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_reports")

    handle = ingest.start(connect_spark, pipeline_file, once=True)
    [outcome] = handle.await_termination(timeout=600)

    assert outcome.error is None and outcome.batches == len(handle.reports) >= 1
    assert sum(r.summary.read for r in handle.reports) == 7
    assert sum(r.summary.dead_letters for r in handle.reports) == 1
    assert sum(r.merged.inserted for r in handle.reports) == 6
    history = connect_spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'tables' / 'connect_reports'}`")
    entries = [json.loads(r.userMetadata) for r in history.collect() if r.operation == "MERGE"]
    assert {e["app_id"] for e in entries} == {f"ingest-connect_reports-{e['app_id'].split('-', 2)[2]}"
                                              for e in entries}
    assert sorted(e["batch_id"] for e in entries) == sorted(r.batch_id for r in handle.reports)


def test_ingest_run_remote_once_prints_batch_lines(connect_spark, kafka, topic, tmp_path, bootstrap, capsys,
                                                   monkeypatch):
    from ingest.cli import main

    send(kafka, topic, orders(5) + orders(2) + [("bad", b"{oops", 0)])
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_cli")

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    out = capsys.readouterr()
    assert code == 0, out.err
    lines = [line for line in out.out.splitlines() if line.startswith("connect_cli batch ")]
    assert lines and sum(int(line.split("read ")[1].split(",")[0]) for line in lines) == 8
    assert "dead letters 1 (decode 1" in out.out
    assert f"connect_cli: done after {len(lines)} batch(es)" in out.out

    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")  # the other way to choose Connect
    assert main(["verify", str(pipeline_file)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["status", str(pipeline_file), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)  # the checkpoint and the Delta log agree, nothing behind
    assert status["ok"] and status["findings"] == []
    assert {(p["partition"], p["end"], p["checkpoint"], p["delta_log"], p["lag"]) for p in status["partitions"]} == {
        (0, 5, 5, 5, 0), (1, 3, 3, 3, 0)}
    assert status["last_batch"]["app_id"].startswith("ingest-connect_cli-")


def test_a_failed_batch_fails_the_run_with_its_error(connect_spark, kafka, topic, tmp_path, bootstrap, capsys):
    from ingest.cli import main

    send(kafka, topic, orders(4))
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_broken")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "connect_broken").write_text("not a table")  # the target cannot be created

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    err = capsys.readouterr().err
    assert code == 1
    # the batch, its planned offsets and the worker's exception, not its traceback's first lines
    assert f"error: pipeline connect_broken failed in batch 0 (offsets {topic}/0:2 {topic}/1:2): " in err
    # the first step to read the target is the check of its writer (`commit.owner`)
    assert "AnalysisException: [DELTA_MISSING_DELTA_TABLE]" in err and "is not a Delta table" in err
    assert "Traceback" not in err


def test_fault_injection_is_refused_on_connect(connect_spark, kafka, topic, tmp_path, bootstrap, capsys,
                                              monkeypatch):
    from ingest.batch.commit import faults
    from ingest.cli import main

    monkeypatch.setenv("INGEST_FAULT_CONFIRM", "crash")
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_faulty")
    with faults.raising("after_target_commit"):
        code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    assert code == 2
    assert "fault injection" in capsys.readouterr().err
    assert not (tmp_path / "checkpoints" / "connect_faulty" / "_ingest_lease.json").exists()


def test_upsert_keeps_the_latest_version_of_each_uid(connect_spark, kafka, topic, tmp_path, bootstrap):
    first = [(f"u{i}", {"order_id": f"o{i}", "amount": 1.0, "ts": "2026-11-01T10:00:00"}, 0) for i in range(4)]
    later = [(f"u{i}", {"order_id": f"o{i}", "amount": 2.0, "ts": "2026-11-01T11:00:00"}, 1) for i in range(2)]
    stale = [("u3", {"order_id": "o3", "amount": 9.0, "ts": "2026-11-01T09:00:00"}, 1)]  # older: loses
    send(kafka, topic, first + later + stale)
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_upsert",
                                   target={"mode": "upsert", "order_by": "ts"})

    [outcome] = ingest.run(connect_spark, pipeline_file, once=True)
    assert outcome.error is None
    send(kafka, topic, [("u2", {"order_id": "o2", "amount": 3.0, "ts": "2026-11-01T12:00:00"}, 0)])
    [again] = ingest.run(connect_spark, pipeline_file, once=True)  # a later version in a later batch
    assert again.error is None

    amounts = {uid: row.amount for uid, row in rows(connect_spark, tmp_path / "tables" / "connect_upsert").items()}
    assert amounts == {"u0": 2.0, "u1": 2.0, "u2": 3.0, "u3": 1.0}
    audit = ingest.verify(connect_spark, pipeline_file)
    assert audit.ok and audit.duplicates == 0


def test_several_pipelines_in_one_application_commit_under_their_own_txn_ids(connect_spark, kafka, topic,
                                                                             tmp_path, bootstrap):
    """Each query's batches run in a worker attached to the session that started it, and a
    batch's txn id is that session's conf: the two pipelines, reading one topic five records a
    batch at the same time, must each commit under their own app id only (read by delta-rs)."""
    from deltalake import DeltaTable as RustDeltaTable

    send(kafka, topic, orders(40))
    names = ("connect_one", "connect_two")
    files = [write_pipeline(tmp_path, topic, name=name,
                            source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                              "max_offsets_per_trigger": 5}}) for name in names]

    outcomes = ingest.run(connect_spark, files, once=True)

    assert [(o.pipeline, o.error) for o in outcomes] == [(name, None) for name in names]
    app_ids = {}
    for name in names:
        commits = [c for c in RustDeltaTable(str(tmp_path / "tables" / name)).history()
                   if c.get("operation") == "MERGE"]
        entries = [json.loads(c["userMetadata"]) for c in commits]
        [app_ids[name]] = {e["app_id"] for e in entries}  # one app id, and it is this pipeline's
        assert app_ids[name].startswith(f"ingest-{name}-")
        assert sorted(e["batch_id"] for e in entries) == list(range(len(entries))) and len(entries) >= 8
        assert sum(e["counts"]["read"] for e in entries) == 40
    for name, other in (names, names[::-1]):
        rust = RustDeltaTable(str(tmp_path / "tables" / name))
        assert rust.transaction_version(app_ids[name]) == max(
            json.loads(c["userMetadata"])["batch_id"] for c in rust.history() if c.get("operation") == "MERGE")
        assert rust.transaction_version(app_ids[other]) is None  # no batch of the other landed here
        assert sorted(rust.to_pyarrow_table().column("_uid").to_pylist()) == [f"u{i:04d}" for i in range(40)]


def test_spark_conf_reaches_the_batches_on_connect(connect_spark, kafka, topic, tmp_path, bootstrap):
    """The pipeline's spark_conf holds where its batches run (the worker's session): a time
    without a zone is read in the pipeline's time zone, not the application's (UTC)."""
    send(kafka, topic, orders(2))
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_conf",
                                   spark_conf={"spark.sql.session.timeZone": "America/New_York"})

    [outcome] = ingest.run(connect_spark, pipeline_file, once=True)

    assert outcome.error is None
    assert connect_spark.conf.get("spark.sql.session.timeZone") in ("UTC", "Etc/UTC")  # the application's, untouched
    target = connect_spark.read.format("delta").load(str(tmp_path / "tables" / "connect_conf"))
    stamps = {row.utc for row in target.selectExpr("date_format(ts, 'yyyy-MM-dd HH:mm') AS utc").collect()}
    assert stamps == {"2026-11-01 15:00"}  # 10:00 in New York is 15:00 UTC


def test_a_table_per_topic_lands_each_topic_in_its_own_table(connect_spark, kafka, topic, tmp_path, bootstrap,
                                                             capsys):
    from ingest.cli import main
    from ingest.kafka.local_broker import create_topic

    second = f"{topic}-b"
    create_topic(kafka.client_config(), second, partitions=2)
    send(kafka, topic, orders(6) + orders(2) + [("bad", b"{oops", 0)])
    send(kafka, second, orders(3))
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_per_topic",
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}",
                                                     "topics": [topic, second]}},
                                   target={"path": str(tmp_path / "tables" / "${topic}")})

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    out = capsys.readouterr()
    assert code == 0, out.err
    for name, count in ((topic, 6), (second, 3)):
        assert sorted(rows(connect_spark, tmp_path / "tables" / name)) == [f"u{i:04d}" for i in range(count)]
    # a report per table, from each table's ledger: what each read, its dead letter
    read: dict[str, int] = {}
    for line in out.out.splitlines():
        if line.startswith("connect_per_topic -> "):
            table = line.split(" batch ")[0]
            read[table] = read.get(table, 0) + int(line.split("read ")[1].split(",")[0])
    assert read == {f"connect_per_topic -> {tmp_path / 'tables' / topic}": 9,
                    f"connect_per_topic -> {tmp_path / 'tables' / second}": 3}, out.out
    assert "dead letters 1 (decode 1" in out.out
    audit = ingest.verify(connect_spark, pipeline_file)
    assert audit.ok, audit


def test_compaction_between_batches_and_ingest_maintain_on_connect(connect_spark, kafka, topic, tmp_path,
                                                                   bootstrap, capsys, monkeypatch):
    """`maintenance.optimize_every` compacts beside the batches, and `ingest maintain` compacts
    (Z-ordered) and vacuums: OPTIMIZE, VACUUM and DESCRIBE DETAIL through SQL on Connect."""
    from ingest.cli import main

    send(kafka, topic, orders(20))
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_maintained",
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                                     "max_offsets_per_trigger": 5}},
                                   maintenance={"optimize_every": 2})

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    out = capsys.readouterr()
    assert code == 0, out.err
    assert "compaction failed" not in out.out + out.err
    target = tmp_path / "tables" / "connect_maintained"
    history = connect_spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()
    merges = [r for r in history if r.operation == "MERGE"]
    assert len(merges) >= 4 and any(r.operation == "OPTIMIZE" for r in history), [r.operation for r in history]

    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")
    assert main(["maintain", str(pipeline_file), "--optimize", "--zorder", "--vacuum"]) == 0
    out = capsys.readouterr()
    assert "optimize (Z-order by _uid)" in out.out and "vacuum" in out.out, out.out + out.err
    operations = [r.operation for r in connect_spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()]
    assert "VACUUM END" in operations
    assert sorted(rows(connect_spark, target)) == [f"u{i:04d}" for i in range(20)]


def test_compaction_beside_a_batch_carries_no_ledger_entry(connect_spark, kafka, topic, tmp_path, bootstrap):
    """Issue 57 point 5: where the batches and `optimize_every` share one server session (a
    server that cannot clone sessions), the batch's txn id and ledger entry are session conf
    while its MERGE runs, and Delta reads `userMetadata` from the session at every commit:
    an OPTIMIZE committed then recorded the batch as done. Compaction has a session of its own."""
    from ingest.batch.commit import ledger
    from ingest.spec.loader import load_file
    from ingest.stream.maintenance import OptimizeSchedule

    pipeline_file = write_pipeline(tmp_path, topic, name="connect_shared", maintenance={"optimize_every": 1})
    pipeline = load_file(pipeline_file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    target = tmp_path / "tables" / "connect_shared"
    for n in range(2):  # two files: something to compact
        connect_spark.range(n, n + 1).write.format("delta").mode("append").save(str(target))
    txn = ledger.batch_txn(pipeline.name, "q", 7, {topic: {0: 7}})
    connect_spark.conf.set(ledger.TXN_APP_ID, txn.app_id)
    connect_spark.conf.set(ledger.TXN_VERSION, str(txn.version))
    connect_spark.conf.set(ledger.USER_METADATA, txn.metadata)
    try:
        [done] = OptimizeSchedule(pipeline, lambda: 0.0).run(connect_spark)
    finally:
        for key in (ledger.TXN_APP_ID, ledger.TXN_VERSION, ledger.USER_METADATA):
            connect_spark.conf.unset(key)
    assert (done.before.count, done.after.count) == (2, 1)
    history = connect_spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()
    [optimize] = [r for r in history if r.operation == "OPTIMIZE"]
    assert optimize.userMetadata is None, optimize.userMetadata


def test_metrics_and_the_consumer_group_on_connect(connect_spark, kafka, topic, tmp_path, bootstrap):
    """/metrics and the consumer group's offsets, fed by the reports the client rebuilds from
    the ledger (the batches themselves run in the server's worker)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    from ingest.kafka.local_broker import free_port
    from tests.integration.processes import wait_for
    from tests.integration.test_metrics import scrape, value

    port, group = free_port(), f"ingest-{topic}"
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_watched",
                                   source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                                     "max_offsets_per_trigger": 10}},
                                   trigger={"processing_time": "1 second"},
                                   metrics={"prometheus": {"port": port}, "consumer_group": group})
    send(kafka, topic, orders(20) + orders(2) + [("bad", b"{oops", 1)])
    ends = {"0": 11, "1": 12}

    handle = ingest.start(connect_spark, pipeline_file)
    try:
        def caught_up():
            samples = scrape(port)
            done = all(value(samples, "ingest_partition_committed_offset", pipeline="connect_watched", topic=topic,
                             partition=p) == end for p, end in ends.items())
            return samples if done else None

        samples = wait_for(caught_up, 600, "/metrics to show the run caught up", poll=1)
        assert value(samples, "ingest_records_read_total", pipeline="connect_watched") == 23
        assert value(samples, "ingest_records_merged_total", pipeline="connect_watched", result="inserted") == 20
        assert value(samples, "ingest_records_dead_lettered_total", pipeline="connect_watched", stage="decode") == 1
        batches = value(samples, "ingest_batches_total", pipeline="connect_watched")
        assert batches >= 2 and batches == len(handle.reports)
        for partition, end in ends.items():
            labels = {"pipeline": "connect_watched", "topic": topic, "partition": partition}
            assert value(samples, "ingest_partition_end_offset", **labels) == end
            assert value(samples, "ingest_partition_lag_records", **labels) == 0
        admin = AdminClient(kafka.client_config())  # held: its futures resolve only while it lives
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        offsets = {str(tp.partition): tp.offset for tp in listed[group].result(timeout=30).topic_partitions}
        assert offsets == ends
    finally:
        handle.stop()
    assert not scrape(port)  # the endpoint goes with the run


def on_partition_0(prefix: str, count: int = 20, start: int = 0) -> list:
    return [(f"{prefix}{i}", {"order_id": f"o{i}", "amount": 1.0, "ts": "2026-11-01T10:00:00"}, 0)
            for i in range(start, start + count)]


def lossy_pipeline(tmp_path, topic, **overrides):
    return write_pipeline(tmp_path, topic, name="connect_lossy", on_data_loss="record",
                          source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                            "allow_data_loss": True}}, **overrides)


def test_a_range_deleted_under_a_running_query_is_recorded_by_its_batch(connect_spark, kafka, topic, tmp_path,
                                                                       bootstrap):
    """The batch's own check, in the server's worker: batch 0 read offsets 0-9; 10 more come
    and retention deletes 10-14 before batch 1 (the next trigger, 10 s on) reads them: Spark
    skips to 15 (allow_data_loss) and batch 1 records 10-14 as lost before it commits."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from tests.integration.processes import wait_for

    pipeline_file = lossy_pipeline(tmp_path, topic, trigger={"processing_time": "10 seconds"})
    send(kafka, topic, on_partition_0("c", 10))
    admin = AdminClient(kafka.client_config())  # held: its futures resolve only while it lives

    handle = ingest.start(connect_spark, pipeline_file)
    try:
        wait_for(lambda: handle.reports, 600, "batch 0's report", poll=0.2)
        send(kafka, topic, on_partition_0("c", 10, start=10))
        for future in admin.delete_records([TopicPartition(topic, 0, 15)]).values():
            future.result(timeout=60)
        wait_for(lambda: len(handle.reports) >= 2, 600, "batch 1's report", poll=0.5)
    finally:
        handle.stop()

    assert [r.summary.read for r in handle.reports[:2]] == [10, 5]
    dead = connect_spark.read.format("delta").load(str(tmp_path / "dead_letter" / "connect_lossy"))
    lost = dead.where("stage = 'lost'").collect()
    assert [(r._topic, r._partition, r._offset) for r in lost] == [(topic, 0, 10)]
    assert lost[0].reason.startswith("offsets 10-14 (5 records) were deleted by Kafka retention")
    audit = ingest.verify(connect_spark, pipeline_file)
    assert audit.ok and audit.target_rows == 15, audit


def test_a_range_lost_to_retention_is_recorded_on_connect(connect_spark, kafka, topic, tmp_path, bootstrap, capsys):
    """on_data_loss: record: offsets retention deleted before the run read them are one dead
    letter of stage `lost`, the run goes on, and verify accounts for the rest."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from ingest.cli import main

    pipeline_file = lossy_pipeline(tmp_path, topic)
    send(kafka, topic, on_partition_0("a"))
    [first] = ingest.run(connect_spark, pipeline_file, once=True)
    assert first.error is None
    send(kafka, topic, on_partition_0("b"))
    admin = AdminClient(kafka.client_config())  # held: its futures resolve only while it lives
    for future in admin.delete_records([TopicPartition(topic, 0, 30)]).values():
        future.result(timeout=60)

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    out = capsys.readouterr()
    assert code == 0, out.err
    assert "offsets 20-29 (10 records) were deleted by retention" in out.out + out.err
    dead = connect_spark.read.format("delta").load(str(tmp_path / "dead_letter" / "connect_lossy"))
    lost = dead.where("stage = 'lost'").collect()
    assert [(r._topic, r._partition, r._offset) for r in lost] == [(topic, 0, 20)]
    assert lost[0].reason.startswith("offsets 20-29 (10 records) were deleted by Kafka retention")
    assert len(rows(connect_spark, tmp_path / "tables" / "connect_lossy")) == 30
    audit = ingest.verify(connect_spark, pipeline_file)
    assert audit.ok and audit.target_rows == 30, audit


def test_a_run_killed_while_spark_wrote_its_first_offsets_starts_again_on_connect(connect_spark, kafka, topic,
                                                                                  tmp_path, bootstrap):
    """The leftover of tests/integration/test_faults.py, where the client cannot delete it:
    the pipeline's own session turns off the check that refuses it."""
    send(kafka, topic, orders(6))
    pipeline_file = write_pipeline(tmp_path, topic, name="connect_killed")
    checkpoint = tmp_path / "checkpoints" / "connect_killed"
    (checkpoint / "offsets").mkdir(parents=True)
    temp = ".0.0d9b5e7a-6f43-4c3e-8d62-2b1f5c9e7a10.tmp"
    (checkpoint / "offsets" / temp).write_text('v1\n{"batchWatermarkMs":0,"batchTimes')

    [outcome] = ingest.run(connect_spark, pipeline_file, once=True)

    assert outcome.error is None
    assert set(rows(connect_spark, tmp_path / "tables" / "connect_killed")) == {f"u{i:04d}" for i in range(6)}
    assert (checkpoint / "commits" / "0").exists()
