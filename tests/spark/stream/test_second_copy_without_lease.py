"""What fences a second copy where there is no lease (object stores; issue 13.5): two
copies of a pipeline share the checkpoint's query id, so they commit a batch under the
same txn app id and version. Delta lets one commit through: the other is skipped, or
fails its conflict check. The rows land once either way."""

from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import functions as F

from ingest.batch.commit import ledger
from ingest.batch.merge.target import create_table
from ingest.batch.merge.upsert import merge_batch
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


def pipeline_for(path):
    return Pipeline(name="copies", source=Source(KafkaSource("unused:9092", ("t",)), format="string"),
                    uid=Uid(coordinates=True), target=Target(path=path), checkpoint=path + "_cp",
                    dead_letter=DeadLetter(path=path + "_dl"))


def batch(spark, first, last):
    return spark.range(first, last).select(
        F.format_string("t/00000/%020d", "id").alias("_uid"), F.col("id").cast("string").alias("value"),
        F.lit("t").alias("_topic"), F.lit(0).alias("_partition"), F.col("id").alias("_offset"),
        F.current_timestamp().alias("_kafka_timestamp"), F.current_timestamp().alias("_ingested_at"))


def commit_as_a_copy(spark, pipeline, rows, batch_id):
    """One copy's commit of `batch_id`, on a session of its own (as each copy's query has)."""
    session = spark.newSession()
    txn = ledger.batch_txn(pipeline.name, "same-query-id", batch_id, {"t": {0: 100}})
    try:
        with ledger.txn_settings(session, txn):
            merge_batch(session, rows, pipeline, {})
        return "committed"
    except Exception as error:  # the loser of a race: Delta's conflict check
        return type(error).__name__ + ": " + str(error).splitlines()[0]


def test_two_copies_commit_one_batch_once(spark, tmp_path):
    pipeline = pipeline_for(str(tmp_path / "target"))
    create_table(spark, pipeline.target, batch(spark, 0, 0))
    # the second copy planned batch 0 with more records: without a lease, only the txn id fences it
    first, second = batch(spark, 0, 60), batch(spark, 0, 100)
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda rows: commit_as_a_copy(spark, pipeline, rows, 0), [first, second]))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{pipeline.target.path}`").where("operation = 'MERGE'").collect()
    assert len(history) == 1, outcomes  # one commit for (app id, batch 0), whatever the interleaving
    rows = spark.read.format("delta").load(pipeline.target.path)
    assert rows.count() == rows.select("_uid").distinct().count()  # no uid twice
    assert rows.count() in (60, 100)
    losers = [o for o in outcomes if o != "committed"]
    assert all("Concurrent" in o for o in losers), outcomes
