"""The harness itself: a Connect session with Delta and the broker, no JVM in the client."""

from __future__ import annotations


def test_the_session_is_connect_with_delta(connect_spark, tmp_path):
    assert getattr(connect_spark, "_jvm", None) is None
    table = tmp_path / "t"
    connect_spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{table}` (n BIGINT) USING delta")
    connect_spark.range(3).withColumnRenamed("id", "n").write.format("delta").mode("append").save(str(table))
    assert connect_spark.read.format("delta").load(str(table)).count() == 3


def test_the_broker_answers(kafka, topic):
    from confluent_kafka.admin import AdminClient

    assert topic in AdminClient(kafka.client_config()).list_topics(timeout=30).topics
