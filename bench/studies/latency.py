"""Latency: produce-to-visible at a steady rate under a 1-second processing-time trigger.

A producer sends RATE records a second for SECONDS to a fresh topic while the
leg's query runs (`ingest`'s query, or the plain append). A record's latency is
the timestamp of the Delta commit that made it visible (commitInfo.timestamp of
the version that added its file) minus its Kafka timestamp (the producer's
create time): both clocks are this machine's. Legs alternate, one topic each.
Per batch (commit), the versions a Delta checkpoint was written for are marked,
and p99 is also given without the checkpoint batches and the batches after them.
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
from bench.harness.runner import Part, log, main

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


def commits(target: str) -> dict[str, tuple[int, int]]:
    """Data file name -> (version, commit timestamp in ms) of the commit that added it."""
    added = {}
    for commit_file in sorted(Path(target, "_delta_log").glob("*.json")):
        version = int(commit_file.name.split(".")[0])
        actions = [json.loads(line) for line in commit_file.read_text().splitlines() if line.strip()]
        stamp = next((a["commitInfo"]["timestamp"] for a in actions if "commitInfo" in a), None)
        for action in actions:
            if "add" in action and stamp is not None:
                added[Path(urllib.parse.unquote(action["add"]["path"])).name] = (version, stamp)
    return added


def checkpoint_versions(target: str) -> set[int]:
    """The versions a Delta checkpoint was written for (classic, multi-part or V2 checkpoints)."""
    return {int(f.name.split(".")[0]) for f in Path(target, "_delta_log").glob("*.checkpoint*")
            if not f.name.endswith(".crc")}


def latencies(spark, target: str) -> list[tuple[int, int]]:
    """(commit version, latency in ms) of every visible record."""
    from pyspark.sql import functions as F

    stamps = commits(target)
    rows = (spark.read.format("delta").load(target)
            .select((F.unix_millis("_kafka_timestamp")).alias("ms"), F.col("_metadata.file_path").alias("f"))
            .collect())
    found = [stamps.get(Path(urllib.parse.unquote(r.f)).name) for r in rows]
    return [(commit[0], commit[1] - r.ms) for r, commit in zip(rows, found, strict=True) if commit]


def per_batch(target: str, records: list[tuple[int, int]]) -> list[dict]:
    """One entry per commit that made records visible (a batch): its version, when it committed
    (s after the run's first such commit), its records' latencies, and whether a Delta
    checkpoint was written for its version (`checkpoint`) or for the batch before
    (`after_checkpoint`: Delta writes a checkpoint after the commit, so the batch that wrote one
    ends later, and the records the next batch takes waited for it)."""
    stamps = {version: stamp for version, stamp in commits(target).values()}
    by_version: dict[int, list[int]] = {}
    for version, millis in records:
        by_version.setdefault(version, []).append(millis)
    checkpoints = checkpoint_versions(target)
    versions = sorted(by_version)
    first = stamps[versions[0]] if versions else 0
    return [{"version": v, "committed_s": round((stamps[v] - first) / 1000, 2), "records": len(by_version[v]),
             "p50_ms": _percentile(by_version[v], 0.5), "max_ms": max(by_version[v]),
             "checkpoint": v in checkpoints,
             "after_checkpoint": i > 0 and versions[i - 1] in checkpoints}
            for i, v in enumerate(versions)]


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
            records = latencies(bench.spark, target)
            values = [millis for _, millis in records]
            batches = per_batch(target, records)
            near_checkpoint = {b["version"] for b in batches if b["checkpoint"] or b["after_checkpoint"]}
            clear = [millis for version, millis in records if version not in near_checkpoint]
            run = {"leg": leg, "rep": rep, "sent": sent, "visible": len(values),
                   "p50_ms": _percentile(values, 0.5), "p99_ms": _percentile(values, 0.99),
                   "p99_without_checkpoints_ms": _percentile(clear, 0.99),
                   "checkpoint_batches": sum(b["checkpoint"] for b in batches),
                   "max_ms": max(values) if values else None, "latencies_ms": sorted(values), "batches": batches}
            log(f"  latency {leg:13} rep {rep}: {len(values)} of {sent} visible, p50 {run['p50_ms']} ms, "
                f"p99 {run['p99_ms']} ms, {run['p99_without_checkpoints_ms']} ms without the "
                f"{run['checkpoint_batches']} checkpoint batches of {len(batches)} and those after them")
            runs.append(run)
    return {"rate": RATE, "seconds": SECONDS, "trigger": TRIGGER, "runs": runs}


def plot(results: dict, path: Path) -> bool:
    """Left: the share of records by latency. Right: each batch's slowest record against when
    the batch committed, the batches that wrote a Delta checkpoint and those after them marked."""
    lat = results["latency"]
    colors = {"plain_append": "tab:gray", "ingest": "tab:blue"}

    def paint(axes) -> None:
        by_record, by_batch = axes
        for leg, color in colors.items():
            for i, run in enumerate(r for r in lat["runs"] if r["leg"] == leg):
                values = [v / 1000 for v in run["latencies_ms"]]
                if not values:
                    continue
                label = leg if i == 0 else None
                by_record.plot(values, [k / len(values) for k in range(1, len(values) + 1)], color=color,
                               alpha=0.8, label=label)
                batches = run.get("batches", [])
                by_batch.plot([b["committed_s"] for b in batches], [b["max_ms"] / 1000 for b in batches],
                              color=color, alpha=0.6, linewidth=1, label=label)
                for key, face, edge, what in (("checkpoint", color, "black", "batch that wrote a Delta checkpoint"),
                                              ("after_checkpoint", "none", color, "the batch after it")):
                    marked = [b for b in batches if b[key]]
                    by_batch.scatter([b["committed_s"] for b in marked], [b["max_ms"] / 1000 for b in marked],
                                     facecolors=face, edgecolors=edge, linewidths=1.5, marker="D", zorder=3,
                                     label=f"{leg}: {what}" if i == 0 and marked else None)
        by_record.set_xlabel("produce-to-visible latency (s)")
        by_record.set_ylabel("share of records")
        by_record.set_title(f"{lat['rate']} records/s for {lat['seconds']} s, trigger {lat['trigger']}")
        by_batch.set_xlabel("commit time (s after the run's first commit)")
        by_batch.set_ylabel("the batch's slowest record (s)")
        by_batch.set_title("per batch")
        by_batch.set_ylim(bottom=0)

    return draw(path, paint, panels=2)


PART = Part("latency", "bench.studies.latency", guarded=True, plot=plot,
            measure=lambda run: run_all(run.bench, run.reps, log),
            title=lambda scale: f"latency: {RATE} records/s, trigger {TRIGGER}")


if __name__ == "__main__":  # this part alone, kept beside the suite's results as latency.json
    sys.exit(main([PART], alone=PART))
