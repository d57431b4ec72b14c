"""What a table with data costs the router's batch: the batch's layout and each table's pool.

Spark plans a partition per Kafka partition with records; every table's jobs filter the
batch the router cached, so that cache's partitions are tasks in each table's first stage."""

from __future__ import annotations

import threading

from ingest.batch.routing import POOL, TopicRouter
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

TOPICS = 12
PER_TOPIC = 10


def per_topic(tmp_path) -> Pipeline:
    return Pipeline(name="layout", source=Source(KafkaSource("unused:9092", pattern=r"t\d+"), "json", "n INT"),
                    uid=Uid(coordinates=True), target=Target(path=str(tmp_path / "tables" / "${topic}")),
                    checkpoint=str(tmp_path / "checkpoint"),
                    dead_letter=DeadLetter(path=str(tmp_path / "dead_letter" / "${topic}")))


def kafka_batch(spark, topics: int = TOPICS):
    """A batch as the Kafka source gives it: a partition per topic (one Kafka partition each),
    offsets ascending within it, the partitions in no topic order."""
    order = [(n * 5) % topics for n in range(topics)]  # t00, t05, t10, t03, ...
    rows = [(f"t{order[p]:02d}", 0, offset, f'{{"n": {offset}}}'.encode())
            for p in range(topics) for offset in range(PER_TOPIC)]
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, topics),  # slice p: topic order[p]
                                 "topic STRING, partition INT, offset BIGINT, value BINARY")


def test_the_batch_is_cached_in_a_partition_per_core_in_topic_order_with_every_record(spark, tmp_path):
    router = TopicRouter(per_topic(tmp_path), threads=4)
    seen = {}
    router._commit_all = lambda raw, batch_id, groups, envelopes: seen.update(raw=raw, groups=groups)
    batch = kafka_batch(spark)
    assert batch.rdd.getNumPartitions() == TOPICS

    router(batch, 0)

    raw = seen["raw"]
    slots = spark.sparkContext.defaultParallelism
    assert raw.rdd.getNumPartitions() == slots  # a table's scan: a task per core, not per topic
    assert sorted(raw.collect()) == sorted(batch.collect())  # the same records, none twice
    for partition in raw.select("topic", "offset").rdd.glom().collect():
        keys = [(row.topic, row.offset) for row in partition]
        assert keys == sorted(keys)  # each topic's records together, in Kafka order
    assert sorted(seen["groups"]) == sorted(str(tmp_path / "tables" / f"t{n:02d}") for n in range(TOPICS))


def test_a_batch_with_no_more_partitions_than_cores_is_cached_as_planned(spark, tmp_path):
    router = TopicRouter(per_topic(tmp_path))
    batch = kafka_batch(spark, topics=1)
    assert router._gathered(batch) is batch  # one busy topic: no sort, no coalesce to pay


def test_a_tables_jobs_run_in_its_threads_scheduler_pool_and_the_threads_pool_comes_back(spark, tmp_path):
    router = TopicRouter(per_topic(tmp_path))
    context = spark.sparkContext
    context.setLocalProperty(POOL, "the query's own")
    try:
        with router._pool(spark, "tables/t01"):
            assert context.getLocalProperty(POOL) == f"ingest {threading.current_thread().name}"
        assert context.getLocalProperty(POOL) == "the query's own"
    finally:
        context.setLocalProperty(POOL, None)
