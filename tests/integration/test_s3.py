"""Targets, dead letters and checkpoints on `s3a://`, against the S3 stand-in on loopback
(tests/s3_server.py: moto's server under the real hadoop-aws and AWS SDK v2)."""

from __future__ import annotations

from dataclasses import replace

from ingest.spec.model import DeadLetter, Target
from tests.integration.conftest import run_once, table


def on_s3(pipeline, root: str):
    return replace(pipeline, target=replace(pipeline.target, path=f"{root}/tables/orders"),
                   dead_letter=DeadLetter(path=f"{root}/dead_letter/orders"),
                   checkpoint=f"{root}/checkpoints/orders")


def test_a_run_writes_target_dead_letters_and_checkpoint_on_s3_and_verify_is_exact(spark, sender, pipeline, s3_root):
    from ingest.audit.verify import verify

    s3_pipeline = on_s3(pipeline, s3_root)
    for n in range(6):
        sender.send({"order_id": f"o{n}", "amount": n, "ts": "2026-11-01T10:00:00"}, uid=f"u{n}", partition=n % 2)
    sender.send({"order_id": "o0", "amount": 0, "ts": "2026-11-01T10:00:00"}, uid="u0", partition=1)  # a retry
    sender.send(b"{not json", uid="bad-1")
    sender.flush()
    run_once(spark, s3_pipeline)
    assert sorted(r._uid for r in table(spark, s3_pipeline.target.path).select("_uid").collect()) == \
        [f"u{n}" for n in range(6)]
    assert table(spark, s3_pipeline.dead_letter.path).count() == 1
    report = verify(spark, s3_pipeline)
    assert report.ok, report


def send_orders(sender, uids, partition_of=lambda n: n % 2):
    for n, uid in enumerate(uids):
        sender.send({"order_id": uid, "amount": n, "ts": "2026-11-01T10:00:00"}, uid=uid, partition=partition_of(n))
    sender.flush()


def uids(spark, path):
    return sorted(r._uid for r in table(spark, path).select("_uid").collect())


def delete_folder(spark, location: str) -> None:
    """What an operator's `aws s3 rm --recursive` does, through the session's S3A."""
    path = spark._jvm.org.apache.hadoop.fs.Path(location)
    assert path.getFileSystem(spark._jsc.hadoopConfiguration()).delete(path, True), location


def test_crashes_a_lost_checkpoint_and_maintenance_on_s3(spark, kafka, topic, sender, pipeline, s3_root, tmp_path,
                                                        monkeypatch, capsys):
    """Kill points where the durable state differs (dead letters committed and the target not;
    the target committed and the checkpoint not), raised in this process as test_matrix.py raises
    them (a SIGKILL at each is test_crash_harness.py's, on local disk: a JVM start each); then the
    checkpoint deleted (the start reads the ledger from the target's log on S3); then
    `maintain --optimize --vacuum` from the command line, a second driver that ingest's log store
    keeps safe (its refusal with Delta's single-driver store: tests/unit/stream/test_log_store.py).
    Exact, and verify OK, after each."""
    from ingest.audit.verify import verify
    from ingest.batch.commit import faults
    from ingest.cli import main
    from tests.integration.conftest import crash_at, run_recovering
    from tests.integration.processes import write_pipeline

    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    s3_pipeline = on_s3(pipeline, s3_root)
    sent = []
    for round_, point in enumerate(("after_dead_letter", "after_target_commit")):
        batch = [f"r{round_}-{n}" for n in range(4)]
        send_orders(sender, batch)
        sender.send(b"{not json", uid=f"bad-{round_}")
        sender.flush()
        sent += batch
        crash_at(spark, s3_pipeline, point)
        run_recovering(spark, s3_pipeline)
        assert uids(spark, s3_pipeline.target.path) == sorted(sent), point
        assert table(spark, s3_pipeline.dead_letter.path).count() == round_ + 1, point

    delete_folder(spark, s3_pipeline.checkpoint)
    send_orders(sender, ["after-loss"])
    plan, _ = run_recovering(spark, s3_pipeline)
    assert any("checkpoint" in note and "missing" in note for note in plan.notes), plan.notes
    assert uids(spark, s3_pipeline.target.path) == sorted([*sent, "after-loss"])
    report = verify(spark, s3_pipeline)
    assert report.ok, report

    pipeline_file = write_pipeline(tmp_path, topic, name="orders", target={"path": s3_pipeline.target.path},
                                   checkpoint=s3_pipeline.checkpoint,
                                   dead_letter={"path": s3_pipeline.dead_letter.path})
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    capsys.readouterr()
    # ingest's log store makes each commit exclusive on a store with conditional writes (the
    # stand-in has them): `maintain` is a second driver it keeps safe, so it is not refused
    assert main(["maintain", str(pipeline_file), "--optimize", "--vacuum"]) == 0
    said = capsys.readouterr().out
    assert f"target {s3_pipeline.target.path}: optimize:" in said and \
        f"target {s3_pipeline.target.path}: vacuum:" in said, said
    assert uids(spark, s3_pipeline.target.path) == sorted([*sent, "after-loss"])
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, s3_pipeline.target.path).history().collect()
    assert history[0].operation == "OPTIMIZE", [r.operation for r in history]
    assert verify(spark, s3_pipeline).ok


def test_a_table_per_topic_on_s3(spark, kafka, pipeline, s3_root):
    import uuid

    from ingest.audit.per_table import verify_per_table
    from ingest.kafka.local_broker import create_topic
    from ingest.spec.model import KafkaSource
    from tests.integration.conftest import Sender

    topics = [f"s3shop{uuid.uuid4().hex[:6]}-{name}" for name in ("orders", "refunds")]
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        send_orders(Sender(kafka, topic), [f"{topic}-{n}" for n in range(3)], partition_of=lambda n: 0)
    shop = replace(pipeline, name="shop", source=replace(pipeline.source, kafka=KafkaSource(kafka.bootstrap,
                                                                                           topics=tuple(topics))),
                   target=Target(path=f"{s3_root}/tables/${{topic}}"),
                   dead_letter=DeadLetter(path=f"{s3_root}/dead_letter/${{topic}}"),
                   checkpoint=f"{s3_root}/checkpoints/shop")
    run_once(spark, shop)
    for topic in topics:
        assert uids(spark, f"{s3_root}/tables/{topic}") == sorted(f"{topic}-{n}" for n in range(3))
    audit = verify_per_table(spark, shop)
    assert audit.ok and len(audit.tables) == 2, audit.to_dict()


def test_cdc_with_hard_deletes_on_s3(spark, kafka, topic, pipeline, s3_root):
    from ingest.spec.model import Cdc, Uid
    from tests.integration.conftest import DebeziumChanges

    changes = DebeziumChanges(kafka, topic)
    cdc = replace(on_s3(pipeline, s3_root), name="customers",
                  source=replace(pipeline.source, schema="id BIGINT, name STRING, tier STRING"),
                  uid=Uid(field="id"), cdc=Cdc(key=("id",)))
    cdc = replace(cdc, target=replace(cdc.target, mode="upsert", deletes="hard"))
    changes.send("c", 1, 10, {"name": "ann", "tier": "a"})
    changes.send("c", 2, 11, {"name": "bob", "tier": "a"})
    changes.send("d", 1, 30)
    changes.flush()
    run_once(spark, cdc)
    changes.send("u", 1, 20, {"name": "ann", "tier": "late"})  # older than the delete: stays deleted
    changes.send("u", 2, 21, {"name": "bob", "tier": "b"})
    changes.flush()
    run_once(spark, cdc)
    found = table(spark, cdc.target.path).orderBy("id")
    assert [(r.id, r.tier, r._sequence) for r in found.collect()] == [(2, "b", 21)]
    log = table(spark, cdc.target.path + "_deletes")
    assert [(r._uid, r._sequence) for r in log.collect()] == [("1", 30)]


TWO_WRITERS_BUCKET = "ingest-two-writers"


def appended(spark, location: str, tag: str, errors: list) -> None:
    try:
        spark.createDataFrame([(tag,)], "writer STRING").write.format("delta").mode("append").save(location)
    except Exception as error:  # noqa: BLE001 - kept for the assertion, whatever Delta raised
        errors.append((tag, error))


def writers_of(spark, location: str) -> list[str]:
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # what a fresh driver reads
    return sorted(r.writer for r in spark.read.format("delta").load(location).collect())


def test_two_drivers_on_s3_with_ingests_log_store_both_commit(spark, s3, s3_bucket, s3_root):
    """Two drivers committing one version of a table on S3. Modelled by two file systems over one
    bucket, `s3a://` and `s3://` (each with its own lock and cache in the log store, as two JVMs
    have); the first driver's PUT of version 1 is held at a relay while the second commits version
    1, then reaches the store. With Delta's default S3 store the held PUT lands on top and the
    second commit is lost (test_s3_log_store.py shows that store losing it); with ingest's, which
    sessions ingest builds use, the held PUT is refused (If-None-Match) and Delta commits the first
    writer again at version 2: both rows stay."""
    import threading

    from tests.s3_server import HeldPut

    s3.create_bucket(TWO_WRITERS_BUCKET)
    relay = HeldPut(s3.port)
    hadoop = spark._jsc.hadoopConfiguration()
    hadoop.set("fs.s3.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem")
    jvm = spark._jvm
    try:
        s3.use_in(spark, TWO_WRITERS_BUCKET, endpoint=relay.endpoint)  # the first driver: through the relay
        jvm.org.apache.hadoop.fs.Path(f"s3://{TWO_WRITERS_BUCKET}/").getFileSystem(hadoop)
        s3.use_in(spark, TWO_WRITERS_BUCKET)  # the second: straight to the stand-in
        jvm.org.apache.hadoop.fs.Path(f"s3a://{TWO_WRITERS_BUCKET}/").getFileSystem(hadoop)
        folder = s3_root.split("/", 3)[3]
        first, second = f"s3://{TWO_WRITERS_BUCKET}/{folder}", f"s3a://{TWO_WRITERS_BUCKET}/{folder}"
        spark.createDataFrame([("creator",)], "writer STRING").write.format("delta").save(second)

        errors: list = []
        relay.arm()
        held = threading.Thread(target=appended, args=(spark, first, "first", errors))
        held.start()
        assert relay.held.wait(timeout=300), "the first driver's commit never reached the relay"
        appended(spark, second, "second", errors)  # version 1 is free: its PUT lands at once
        relay.release.set()
        held.join(timeout=300)
        assert not errors, errors  # both were told they committed
        assert writers_of(spark, second) == ["creator", "first", "second"]  # and both did
    finally:
        relay.close()


def test_two_writers_of_one_driver_on_s3_both_commit(spark, s3, s3_bucket, s3_root):
    """The same race inside one driver, as the run's batches and its `maintenance.optimize_every`
    compaction meet: the log store's lock per path makes the second writer wait for the held PUT,
    find version 1 taken and commit version 2. Both rows stay."""
    import threading
    import time

    from tests.s3_server import HeldPut

    bucket = s3.create_bucket("ingest-one-driver")
    relay = HeldPut(s3.port)
    try:
        s3.use_in(spark, bucket, endpoint=relay.endpoint)
        location = f"s3a://{bucket}/{s3_root.split('/', 3)[3]}"
        spark.createDataFrame([("creator",)], "writer STRING").write.format("delta").save(location)
        errors: list = []
        relay.arm()
        writers = [threading.Thread(target=appended, args=(spark, location, tag, errors))
                   for tag in ("first", "second")]
        writers[0].start()
        assert relay.held.wait(timeout=300), "the first writer's commit never reached the relay"
        writers[1].start()
        time.sleep(15)  # the second writer's job reaches its commit meanwhile (9 s end to end above)
        relay.release.set()
        for writer in writers:
            writer.join(timeout=300)
        assert not errors, errors
        assert writers_of(spark, location) == ["creator", "first", "second"]
    finally:
        relay.close()
