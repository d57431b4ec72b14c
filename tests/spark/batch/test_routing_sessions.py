"""Parallel per-table MERGEs keep each thread's txn id apart (cloned sessions)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.commit import ledger
from ingest.batch.merge.target import create_table
from ingest.batch.merge.upsert import merge_batch
from ingest.batch.routing import INTERPRETED, _cloner, interpreted
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

TABLES = 4


def rows(spark, table: int):
    return spark.range(0, 20).select(
        F.format_string(f"t{table}-%03d", "id").alias("_uid"), F.lit(table).alias("amount"),
        F.lit(f"topic{table}").alias("_topic"), F.lit(0).alias("_partition"), F.col("id").alias("_offset"),
        F.current_timestamp().alias("_kafka_timestamp"), F.current_timestamp().alias("_ingested_at"))


def pipeline_for(path: str) -> Pipeline:
    return Pipeline(name="threads", source=Source(KafkaSource("unused:9092", ("t",)), format="string"),
                    uid=Uid(coordinates=True), target=Target(path=path), checkpoint=path + "_cp",
                    dead_letter=DeadLetter(path=path + "_dl"))


def test_each_thread_commits_under_its_own_txn_id(spark, tmp_path):
    clone = _cloner(spark)
    assert clone is not None
    pipelines = [pipeline_for(str(tmp_path / f"t{n}")) for n in range(TABLES)]
    for n, pipeline in enumerate(pipelines):
        create_table(spark, pipeline.target, rows(spark, n))
    together = threading.Barrier(TABLES)  # every thread has set its conf before any MERGE runs

    def commit(n: int) -> None:
        session = clone()
        source = DataFrame(rows(spark, n)._jdf, session)
        txn = ledger.batch_txn("threads", "q", 7, {f"topic{n}": {0: 20}}, table=pipelines[n].target.path)
        with ledger.txn_settings(session, txn):
            together.wait(timeout=120)
            merge_batch(session, source, pipelines[n], {})

    with ThreadPoolExecutor(TABLES) as pool:
        list(pool.map(commit, range(TABLES)))

    for n, pipeline in enumerate(pipelines):
        [(_, entry)] = ledger.history_entries(spark, pipeline.target.path, False, "threads")
        assert entry["app_id"] == ledger.app_id("threads", "q", pipeline.target.path)
        assert entry["end_offsets"] == {f"topic{n}": {"0": 20}}
        table = spark.read.format("delta").load(pipeline.target.path)
        assert table.count() == 20 and {r.amount for r in table.select("amount").collect()} == {n}
    assert spark.conf.get(ledger.TXN_APP_ID, None) is None  # the batch's own session untouched

    # the txn id took: the same batch again is skipped in every table
    replayed = clone()
    txn = ledger.batch_txn("threads", "q", 7, {"topic0": {0: 40}}, table=pipelines[0].target.path)
    with ledger.txn_settings(replayed, txn):
        merge_batch(replayed, DataFrame(rows(spark, 9)._jdf, replayed), pipelines[0], {})
    assert spark.read.format("delta").load(pipelines[0].target.path).count() == 20


def test_a_batch_of_several_tables_evaluates_their_plans_interpreted(spark):
    """Each table's clone evaluates plans interpreted (compiling every table's plans again
    each batch cost more than it saved), unless the session was given a setting of its own."""
    session = spark.newSession()
    for key in INTERPRETED:  # the test session is interpreted throughout: here, Spark's defaults
        session.conf.unset(key)
    table_session = _cloner(session)()
    assert {key: table_session.conf.get(key) for key in INTERPRETED} == INTERPRETED
    assert session.conf.get("spark.sql.codegen.wholeStage") == "true"  # the batch's own untouched
    with interpreted(session):  # tables one after another, on the batch's session
        assert {key: session.conf.get(key) for key in INTERPRETED} == INTERPRETED
    assert session.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert "spark.sql.codegen.factoryMode" not in session.conf.getAll

    session.conf.set("spark.sql.codegen.wholeStage", "true")  # the user's own choice stands
    assert _cloner(session)().conf.get("spark.sql.codegen.wholeStage") == "true"
    with interpreted(session):
        assert session.conf.get("spark.sql.codegen.wholeStage") == "true"
