"""The stack end to end: a real broker, Spark's Kafka source, Delta, idempotent commits."""

import json

from chispa import assert_df_equality
from confluent_kafka import Producer
from pyspark.sql import functions as F


def produce_committed_and_aborted(kafka, topic, committed: int, aborted: int) -> None:
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for i in range(committed):
        producer.produce(topic, key=str(i), value=json.dumps({"id": i, "name": f"n{i}"}))
    assert producer.flush(30) == 0

    txn = Producer({**kafka.client_config(), "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(aborted):
        txn.produce(topic, value=json.dumps({"id": 100_000 + i, "name": "aborted"}))
    txn.flush(30)
    txn.abort_transaction(30)


def test_committed_records_land_and_aborted_ones_do_not(spark, kafka, topic, tmp_path):
    produce_committed_and_aborted(kafka, topic, committed=1000, aborted=50)
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .option("kafka.isolation.level", "read_committed")
           .load())
    decoded = raw.select(F.from_json(F.col("value").cast("string"), "id INT, name STRING").alias("r")).select("r.*")
    table = str(tmp_path / "table")
    query = (decoded.writeStream.format("delta")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True)
             .start(table))
    try:
        assert query.awaitTermination(180), "query did not finish"
        assert query.exception() is None
    finally:
        query.stop()

    expected = spark.createDataFrame([(i, f"n{i}") for i in range(1000)], "id INT, name STRING")
    actual = spark.read.format("delta").load(table)
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_merge_with_same_txn_id_commits_once(spark, tmp_path):
    from delta.tables import DeltaTable

    path = str(tmp_path / "target")
    spark.createDataFrame([(0, "zero")], "id INT, name STRING").write.format("delta").save(path)
    updates = spark.createDataFrame([(1, "one"), (2, "two")], "id INT, name STRING")

    def merge_once():
        spark.conf.set("spark.databricks.delta.write.txnAppId", "smoke-app")
        spark.conf.set("spark.databricks.delta.write.txnVersion", "7")
        try:
            (DeltaTable.forPath(spark, path).alias("t")
             .merge(updates.alias("s"), "t.id = s.id")
             .whenNotMatchedInsertAll().execute())
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")

    merge_once()
    merge_once()

    history = DeltaTable.forPath(spark, path).history().select("operation").collect()
    assert [row.operation for row in history].count("MERGE") == 1
    assert spark.read.format("delta").load(path).count() == 3
