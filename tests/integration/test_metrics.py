"""/metrics during a run, checked against the Delta log; the consumer group's offsets."""

from __future__ import annotations

from urllib.request import urlopen

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from ingest.batch.commit import ledger
from ingest.kafka.local_broker import free_port
from tests.integration.processes import IngestProcess, wait_for, write_pipeline
from tests.integration.test_faults import send


def scrape(port: int) -> dict[tuple, float]:
    """{(sample name, sorted labels): value}; empty while nothing answers."""
    try:
        text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_match_the_delta_log_and_the_group_holds_the_offsets(spark, kafka, topic, tmp_path):
    port, group = free_port(), f"ingest-{topic}"
    pipeline_file = write_pipeline(
        tmp_path, topic, name="watched",
        source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                          "max_offsets_per_trigger": 60},
                "format": "json", "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"},
        trigger={"processing_time": "1 second"},
        metrics={"prometheus": {"port": port}, "consumer_group": group})
    send(kafka, topic, [f"a{i}" for i in range(100)], partition=0)
    send(kafka, topic, [f"b{i}" for i in range(40)] + [f"a{i}" for i in range(10)], partition=1)
    send(kafka, topic, ["bad1", "bad2"], partition=1, value=b"not json")
    ends = {"0": 100, "1": 52}

    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "run.log", once=False)
    try:
        def caught_up():
            samples = scrape(port)
            done = all(value(samples, "ingest_partition_committed_offset", pipeline="watched", topic=topic,
                             partition=p) == end for p, end in ends.items())
            return samples if done and value(samples, "ingest_delta_version", pipeline="watched") else None

        samples = wait_for(caught_up, 900, "/metrics to show the run caught up", lambda: run.output()[-3000:],
                           poll=1)
        target, dead = str(tmp_path / "tables" / "watched"), str(tmp_path / "dead_letter" / "watched")
        entries = ledger.history_entries(spark, target, False, "watched")
        # the version is refreshed just after the offsets: give it one refresh
        samples = wait_for(lambda: (lambda now: now if value(now, "ingest_delta_version", pipeline="watched")
                                    == entries[0][0] else None)(scrape(port)), 60, "the Delta version")
        recorded = ledger.recorded_offsets(entries + ledger.history_entries(spark, dead, False, "watched"))
        for partition, end in ends.items():
            labels = {"pipeline": "watched", "topic": topic, "partition": partition}
            assert recorded[topic][int(partition)] == end
            assert value(samples, "ingest_partition_end_offset", **labels) == end
            assert value(samples, "ingest_partition_lag_records", **labels) == 0
            assert value(samples, "ingest_partition_lag_seconds", **labels) == 0
        print(urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())  # shown by pytest -rA
        rows = spark.read.format("delta").load(target).count()
        assert value(samples, "ingest_records_read_total", pipeline="watched") == 152
        assert value(samples, "ingest_records_merged_total", pipeline="watched", result="inserted") == rows == 140
        assert value(samples, "ingest_records_dead_lettered_total", pipeline="watched", stage="decode") == 2
        batches = value(samples, "ingest_batches_total", pipeline="watched")
        assert batches >= 3 and value(samples, "ingest_batch_duration_seconds_count", pipeline="watched") == batches
        assert value(samples, "ingest_last_commit_timestamp_seconds", pipeline="watched") > 0

        admin = AdminClient(kafka.client_config())
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        offsets = {str(tp.partition): tp.offset for tp in listed[group].result(timeout=30).topic_partitions}
        assert offsets == ends
    finally:
        run.terminate()
    assert run.wait(timeout=120) == 0, run.output()[-3000:]
    assert not scrape(port)  # the endpoint goes with the run
