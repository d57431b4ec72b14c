"""One pass per micro-batch: what the processor learns, keeps and commits, on Kafka-shaped rows."""

import json
import uuid

import pytest
from delta.tables import DeltaTable

from ingest.batch.commit import ledger
from ingest.batch.commit.warm_state import CHECKPOINT_EVERY, CHECKPOINT_JOB_GROUP, JOB_GROUP, TABLE_CHECKPOINT_INTERVAL
from ingest.batch.processor import BatchProcessor, payload_schema
from ingest.spec.model import Cdc, DeadLetter, KafkaSource, Pipeline, Source, Target, Uid
from tests.integration.processes import wait_for

KAFKA_SCHEMA = ("topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, key BINARY, value BINARY, "
                "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")


def kafka_rows(spark, records):
    """records: (partition, offset, payload bytes, uid header)"""
    rows = [("orders", p, o, None, None, bytearray(v), [("message-id", bytearray(u.encode()))])
            for p, o, v, u in records]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def order(n: int) -> bytes:
    return json.dumps({"order_id": f"o{n}", "amount": float(n)}).encode()


def make_processor(spark, kafka, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    query_id = str(uuid.uuid4())
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}))
    pipeline = Pipeline(
        name="orders",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=("orders",)), format="json",
                      schema="order_id STRING NOT NULL, amount DOUBLE"),
        uid=Uid(header="message-id"), target=Target(path=str(tmp_path / "target")),
        checkpoint=str(checkpoint), dead_letter=DeadLetter(path=str(tmp_path / "dead")))
    reports = []
    processor = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=reports.append)
    return processor, reports, ledger.app_id(pipeline.name, query_id)


def no_cached_frames(spark) -> bool:
    """No DataFrame persisted (Delta's own snapshot caches are RDDs, not counted here)."""
    return spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_one_pass_counts_offsets_and_uids(spark, kafka, tmp_path):
    processor, reports, app = make_processor(spark, kafka, tmp_path)
    batch = kafka_rows(spark, [
        (0, 10, order(1), "u-1"), (0, 11, order(2), "u-2"), (0, 12, order(1), "u-1"),  # a re-send
        (1, 5, b"{broken", "u-3"), (1, 6, order(4), "u-4"), (1, 7, order(2), "u-2"),  # re-send, other partition
    ])
    assert no_cached_frames(spark)
    processor(batch, 0)

    summary = reports[0].summary
    assert (summary.read, summary.unique, summary.dead_letters) == (6, 3, 1)
    assert summary.start_offsets == {"orders": {0: 10, 1: 5}}
    assert summary.end_offsets == {"orders": {0: 13, 1: 8}}
    assert (summary.bounds["uid_min"], summary.bounds["uid_max"]) == ("u-1", "u-4")
    assert reports[0].merged.inserted == 3
    rows = spark.read.format("delta").load(str(tmp_path / "target")).collect()
    assert sorted((r._uid, r._partition, r._offset) for r in rows) == [
        ("u-1", 0, 10), ("u-2", 0, 11), ("u-4", 1, 6)]  # the first Kafka position of each uid
    dead = spark.read.format("delta").load(str(tmp_path / "dead")).collect()
    assert [(r._partition, r._offset, bytes(r.value)) for r in dead] == [(1, 5, b"{broken")]
    assert no_cached_frames(spark)  # the batch's cache is released
    assert ledger.txn_version(spark, str(tmp_path / "target"), False, app, "orders") == 0


def test_the_cached_merge_source_holds_no_raw_bytes(spark, kafka, tmp_path):
    processor, reports, _ = make_processor(spark, kafka, tmp_path)
    seen = []

    def while_cached(report):
        manager = spark._jsparkSession.sharedState().cacheManager()
        entries = manager.cachedData()
        seen.extend(entries.apply(i).cachedRepresentation().schema().treeString()
                    for i in range(entries.size()))
        reports.append(report)

    processor.on_report = while_cached
    processor(kafka_rows(spark, [(0, 0, order(1), "u-1")]), 0)

    assert len(seen) == 1  # one cached frame while the batch runs: the MERGE source
    assert "offset" in seen[0] and "amount" in seen[0]
    assert "value" not in seen[0] and "headers" not in seen[0] and "key:" not in seen[0]


def test_a_batch_without_failures_writes_no_dead_letters(spark, kafka, tmp_path):
    processor, reports, _ = make_processor(spark, kafka, tmp_path)
    processor(kafka_rows(spark, [(0, 0, order(1), "u-1"), (0, 1, order(2), "u-2")]), 0)

    assert reports[0].summary.dead_letters == 0
    assert not (tmp_path / "dead").exists()
    assert spark.read.format("delta").load(str(tmp_path / "target")).count() == 2


def test_empty_and_all_duplicate_batches_still_commit_their_txn(spark, kafka, tmp_path):
    processor, reports, app = make_processor(spark, kafka, tmp_path)
    target = str(tmp_path / "target")
    processor(kafka_rows(spark, [(0, 0, order(1), "u-1")]), 0)
    processor(kafka_rows(spark, [(0, 1, order(1), "u-1")]), 1)  # a re-send: nothing to insert
    processor(kafka_rows(spark, []), 2)

    assert [(r.summary.read, r.summary.unique, r.merged.inserted) for r in reports] == [
        (1, 1, 1), (1, 1, 0), (0, 0, 0)]
    assert ledger.txn_version(spark, target, False, app, "orders") == 2
    assert spark.read.format("delta").load(target).count() == 1


def change(partition: int, offset: int, op: str, key: int, lsn: int):
    """A Debezium change of a customers row, as test_processor's Kafka rows take it."""
    image = {"id": key, "name": f"n{key}-{lsn}"}
    value = json.dumps({"before": image if op == "d" else None, "after": None if op == "d" else image,
                        "source": {"connector": "postgresql", "lsn": lsn}, "op": op, "ts_ms": lsn})
    return ("customers", partition, offset, None, json.dumps({"id": key}).encode(), value.encode(), [])


def test_hard_deletes_log_only_in_a_batch_that_has_deletes(spark, kafka, tmp_path):
    """The delete log's MERGE is its own commit: a batch without deletes skips it, and its
    late change to a deleted key still loses to the delete logged batches before."""
    query_id = str(uuid.uuid4())
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "metadata").write_text(json.dumps({"id": query_id}))
    pipeline = Pipeline(
        name="customers",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=("customers",)), format="json",
                      schema="id BIGINT, name STRING"),
        uid=Uid(field="id"), cdc=Cdc(key=("id",)), target=Target(path=str(tmp_path / "target"), deletes="hard"),
        checkpoint=str(tmp_path / "checkpoint"), dead_letter=DeadLetter(path=str(tmp_path / "dead")))
    reports = []
    processor = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=reports.append)

    def batch(*changes):
        return spark.createDataFrame(list(changes), KAFKA_SCHEMA)

    processor(batch(change(0, 0, "c", 1, 10), change(0, 1, "c", 2, 11)), 0)
    processor(batch(change(0, 2, "d", 1, 12), change(0, 3, "u", 2, 13)), 1)
    processor(batch(change(0, 4, "u", 1, 5), change(0, 5, "c", 3, 14)), 2)  # 1: older than its delete

    assert [r.summary.deletes for r in reports] == [0, 1, 0]
    log = DeltaTable.forPath(spark, str(tmp_path / "target_deletes"))
    merges = [json.loads(r.userMetadata)["batch_id"] for r in log.history().collect() if r.operation == "MERGE"]
    assert merges == [1]
    assert [(r._uid, r._sequence) for r in log.toDF().collect()] == [("1", 12)]
    target = spark.read.format("delta").load(str(tmp_path / "target"))
    assert sorted((r.id, r.name) for r in target.collect()) == [(2, "n2-13"), (3, "n3-14")]


def test_a_cdc_transform_need_not_name_the_change_columns(spark, kafka, tmp_path):
    """A `select` names the row's columns; the change's `_sequence` and `_op` are ingest's own and
    follow it, as `_uid` and the coordinates do. Before, a select without them failed the batch
    with an unresolved `_sequence`."""
    from ingest.spec.model import Transform

    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    pipeline = Pipeline(
        name="customers",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=("customers",)), format="json",
                      schema="id BIGINT, name STRING"),
        uid=Uid(field="id"), cdc=Cdc(key=("id",)), target=Target(path=str(tmp_path / "target")),
        transform=Transform(select=("id", "upper(name) AS name")),
        checkpoint=str(tmp_path / "checkpoint"), dead_letter=DeadLetter(path=str(tmp_path / "dead")))
    processor = BatchProcessor(pipeline, payload_schema(spark, pipeline))

    def batch(*changes):
        return spark.createDataFrame(list(changes), KAFKA_SCHEMA)

    processor(batch(change(0, 0, "c", 1, 10), change(0, 1, "u", 1, 12), change(0, 2, "c", 2, 11)), 0)
    processor(batch(change(0, 3, "u", 1, 11), change(0, 4, "d", 2, 13)), 1)  # 1: older than lsn 12

    target = spark.read.format("delta").load(str(tmp_path / "target"))
    assert sorted((r.id, r.name, r._sequence, r._op, r._deleted) for r in target.collect()) == [
        (1, "N1-12", 12, "u", False), (2, "N2-11", 13, "d", True)]


def test_a_cdc_batch_is_ranked_once_in_the_pass_that_fills_its_cache(spark, kafka, tmp_path):
    """Each key's last change by sequence, then partition and offset, is marked (KEEP) by the
    window of the pass that fills the batch's cache; the MERGE's rows are those marked, with no
    window of their own over the cache, and the unique count is the keys'."""
    from ingest.batch.merge import mode as merge_mode
    from ingest.batch.processor import mark_kept, slim, staged_records, summarize
    from ingest.batch.staged import STAGE

    pipeline = Pipeline(
        name="customers",
        source=Source(kafka=KafkaSource(bootstrap_servers=kafka.bootstrap, topics=("customers",)), format="json",
                      schema="id BIGINT, name STRING"),
        uid=Uid(field="id"), cdc=Cdc(key=("id",)), target=Target(path=str(tmp_path / "target")),
        checkpoint=str(tmp_path / "checkpoint"), dead_letter=DeadLetter(path=str(tmp_path / "dead")))
    processor = BatchProcessor(pipeline, payload_schema(spark, pipeline))
    frame = spark.createDataFrame([
        change(0, 0, "c", 1, 10), change(1, 0, "u", 1, 12), change(0, 1, "u", 1, 11),  # 1: lsn 12 last
        change(0, 2, "c", 2, 11), change(1, 1, "u", 2, 11), change(0, 3, "u", 2, 11),  # 2: a tie, partition 1 last
        ("customers", 0, 4, None, None, b"{broken", []),
    ], KAFKA_SCHEMA)
    source = mark_kept(slim(staged_records(processor._decode(frame), pipeline)), pipeline).cache()
    try:
        summary = summarize(source, pipeline)
        rows = merge_mode.batch_rows(source.where(source[STAGE].isNull()), pipeline)

        def windows(df) -> int:
            return df._jdf.queryExecution().optimizedPlan().toString().count("Window [")
        assert windows(rows) == windows(source), "the MERGE's rows rank the cached batch again"
        assert (summary.unique, summary.by_stage["decode"]) == (2, 1)
        assert sorted((r._uid, r._sequence, r._partition, r._offset, r.name) for r in rows.collect()) == [
            ("1", 12, 1, 0, "n1-12"), ("2", 11, 1, 1, "n2-11")]
    finally:
        source.unpersist()


def jobs_since(spark, first_id: int) -> list[tuple[str, str]]:
    """(job group, description) of the Spark jobs with an id at or above `first_id`."""
    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()  # the last jobs' events are in the store
    jobs = context.statusStore().jobsList(None).iterator()  # newest first
    found = []
    while jobs.hasNext():
        job = jobs.next()
        if job.jobId() < first_id:
            break
        group, text = job.jobGroup(), job.description()
        found.append((group.get() if group.isDefined() else "", text.get() if text.isDefined() else job.name()))
    return found


def next_job_id(spark) -> int:
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    return jobs.head().jobId() + 1 if jobs.size() else 0


def test_the_next_table_state_is_computed_beside_the_next_batch(spark, kafka, tmp_path):
    processor, reports, app = make_processor(spark, kafka, tmp_path)
    processor(kafka_rows(spark, [(0, 0, order(1), "u-1")]), 0)
    wait_for(lambda: any(group == JOB_GROUP for group, _ in jobs_since(spark, 0)), 120,
             "a job warming the table's state")

    mark = next_job_id(spark)
    processor(kafka_rows(spark, [(0, 1, order(2), "u-2")]), 1)
    batch = [(group, text) for group, text in jobs_since(spark, mark) if group != JOB_GROUP]
    assert batch, "the batch ran no Spark job"
    # Without the warm state the MERGE's txn id check computes it: Delta names that job so.
    assert not [text for _, text in batch if "Compute snapshot" in text], batch
    assert [r.merged.inserted for r in reports] == [1, 1]
    assert ledger.txn_version(spark, str(tmp_path / "target"), False, app, "orders") == 1


@pytest.mark.parametrize("table", ["target", "dead"])
@pytest.mark.parametrize("unfinished_commit", [False, True], ids=["empty_folders", "a_temporary_first_commit"])
def test_a_log_left_by_a_kill_before_the_first_commit_is_no_table(spark, kafka, tmp_path, unfinished_commit, table):
    # What Delta 4.4 leaves when a run dies between making the log's folder and its first commit
    # (with the commit's temporary file when the kill came during its write; the crash harness's
    # random kill found it): createIfNotExists took it for a table and failed on every run after.
    log = tmp_path / table / "_delta_log"
    (log / "_staged_commits").mkdir(parents=True)
    if unfinished_commit:
        (log / f".{0:020d}.json.{uuid.uuid4()}.tmp").touch()
    processor, reports, _ = make_processor(spark, kafka, tmp_path)

    processor(kafka_rows(spark, [(0, 0, order(1), "u-1"), (0, 1, b"{broken", "u-2")]), 0)

    assert (reports[0].merged.inserted, reports[0].summary.dead_letters) == (1, 1)
    assert spark.read.format("delta").load(str(tmp_path / "target")).count() == 1
    assert spark.read.format("delta").load(str(tmp_path / "dead")).count() == 1


def test_the_checkpoint_is_written_beside_the_batches_not_in_them(spark, kafka, tmp_path):
    processor, reports, _ = make_processor(spark, kafka, tmp_path)
    log_folder = tmp_path / "target" / "_delta_log"
    mark = next_job_id(spark)
    for batch in range(CHECKPOINT_EVERY + 1):  # version 0 makes the table; each batch commits one
        processor(kafka_rows(spark, [(0, batch, order(batch), f"u-{batch}")]), batch)
    wait_for(lambda: list(log_folder.glob("*.checkpoint.parquet")), 120, "a checkpoint of the target")

    properties = spark.sql(f"DESCRIBE DETAIL delta.`{tmp_path / 'target'}`").first()["properties"]
    assert properties["delta.checkpointInterval"] == str(TABLE_CHECKPOINT_INTERVAL)
    [checkpoint] = log_folder.glob("*.checkpoint.parquet")
    assert int(checkpoint.name.split(".")[0]) == CHECKPOINT_EVERY
    jobs = jobs_since(spark, mark)
    assert [text for group, text in jobs if group == CHECKPOINT_JOB_GROUP], jobs
    # Delta's own checkpoint, in the batch's thread, at version 10 before: none of the batch's jobs now
    assert not [text for group, text in jobs if "checkpoint" in text.lower() and group != CHECKPOINT_JOB_GROUP]
    assert spark.read.format("delta").load(str(tmp_path / "target")).count() == CHECKPOINT_EVERY + 1
