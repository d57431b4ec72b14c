"""Latency: produce-to-visible at a steady rate under a 1-second processing-time trigger.

A producer sends RATE records a second for SECONDS to a fresh topic while the
leg's query runs (`ingest`'s query, or the plain append). A record's latency is
the timestamp of the Delta commit that made it visible (commitInfo.timestamp of
the version that added its file) minus its Kafka timestamp (the producer's
create time): both clocks are this machine's. Legs alternate, one topic each.
"""

from __future__ import annotations

import json
import random
import sys
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Producer

from bench.harness import datagen
from bench.harness.legs import Topic, append_query, bench_pipeline, decoded, fresh_dir, merge_bounds
from bench.harness.report import draw

RATE = 200  # records per second
SECONDS = 40
TRIGGER = "1 second"
LEGS = ("plain_append", "ingest")


def _produce_steadily(client_config: dict, topic: str, stop_after: float) -> int:
    producer = Producer({**datagen.producer_config(client_config), "linger.ms": 5})
    rnd = random.Random(11)
    make_uid = datagen.Uuid7()
    sent, began = 0, time.monotonic()
    while (elapsed := time.monotonic() - began) < stop_after:
        due = int(elapsed * RATE)
        while sent < due:
            uid = make_uid()
            datagen.send(producer, topic, datagen.payload(uid, time.time_ns() // 1_000_000, rnd), uid)
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(60)
    return sent


def _start(bench, leg: str, topic_name: str, root: Path):
    topic = bench_topic(topic_name)
    if leg == "ingest":
        from ingest.spec.model import Trigger
        from ingest.stream.query import start_query

        pipeline = replace(bench_pipeline(bench.kafka.bootstrap, topic_name, root, None),
                           trigger=Trigger(available_now=False, processing_time=TRIGGER))
        with merge_bounds(True):
            query, _ = start_query(bench.spark, pipeline)
        return query, pipeline.target.path
    return append_query(bench, decoded(bench, topic, root), root, TRIGGER)


def bench_topic(name: str) -> Topic:
    return Topic(name, 2, 0, 0, Path("/dev/null"))


def commit_times(target: str) -> dict[str, int]:
    """Data file name -> the commit timestamp (ms) of the version that added it."""
    added = {}
    for log in sorted(Path(target, "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        stamp = next((a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a), None)
        for action in actions:
            if "add" in action and stamp is not None:
                added[Path(urllib.parse.unquote(action["add"]["path"])).name] = stamp
    return added


def latencies(spark, target: str) -> list[int]:
    from pyspark.sql import functions as F

    stamps = commit_times(target)
    rows = (spark.read.format("delta").load(target)
            .select((F.unix_millis("_kafka_timestamp")).alias("ms"), F.col("_metadata.file_path").alias("f"))
            .collect())
    return [stamps[Path(urllib.parse.unquote(r.f)).name] - r.ms for r in rows
            if Path(urllib.parse.unquote(r.f)).name in stamps]


def _percentile(values: list[int], share: float):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else None


def run_all(bench, reps: int, log) -> dict:
    runs = []
    for rep in range(reps):
        for leg in LEGS if rep % 2 == 0 else LEGS[::-1]:
            name = f"bench-latency-{leg}-{rep}"
            datagen.create_topic(bench.kafka.client_config(), name, 2)
            root = fresh_dir(bench.work / "latency" / f"{leg}-{rep}")
            query, target = _start(bench, leg, name, root)
            try:
                time.sleep(3)  # the query's first (empty) trigger, before the clock matters
                sent = _produce_steadily(bench.kafka.client_config(), name, SECONDS)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    if Path(target, "_delta_log").exists() and \
                            bench.spark.read.format("delta").load(target).count() >= sent:
                        break
                    time.sleep(1)
            finally:
                query.stop()
            values = latencies(bench.spark, target)
            run = {"leg": leg, "rep": rep, "sent": sent, "visible": len(values),
                   "p50_ms": _percentile(values, 0.5), "p99_ms": _percentile(values, 0.99),
                   "max_ms": max(values) if values else None, "latencies_ms": sorted(values)}
            log(f"  latency {leg:13} rep {rep}: {len(values)} of {sent} visible, p50 {run['p50_ms']} ms, "
                f"p99 {run['p99_ms']} ms")
            runs.append(run)
    return {"rate": RATE, "seconds": SECONDS, "trigger": TRIGGER, "runs": runs}


def plot(results: dict, path: Path) -> bool:
    lat = results["latency"]

    def paint(axis) -> None:
        for leg, color in (("plain_append", "tab:gray"), ("ingest", "tab:blue")):
            for i, run in enumerate(r for r in lat["runs"] if r["leg"] == leg):
                values = [v / 1000 for v in run["latencies_ms"]]
                if not values:
                    continue
                axis.plot(values, [k / len(values) for k in range(1, len(values) + 1)], color=color,
                          alpha=0.8, label=leg if i == 0 else None)
        axis.set_xlabel("produce-to-visible latency (s)")
        axis.set_ylabel("share of records")
        axis.set_title(f"{lat['rate']} records/s for {lat['seconds']} s, processing-time trigger {lat['trigger']}")

    return draw(path, paint)


if __name__ == "__main__":  # this part alone, kept beside the suite's results as latency.json
    from bench.studies import suite

    sys.exit(suite.main(part="latency"))
