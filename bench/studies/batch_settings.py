"""Settings for small local batches, chosen by measurement (docs/performance.md).

One SparkSession (local[2], ingest's local defaults), no broker: each variant of
the settings runs ingest's batch function (`BatchProcessor`) and a plain Delta
append of the same decoded rows on the same Kafka-shaped 500-record batches,
alternating, and reports the median batch time of each, their ratio and the
Spark jobs per batch (counted from the status store). The settings are SQL
confs, set on the one session between variants. Usage:

    bench/run batch_settings [--batches 12] [--out bench/results/batch_settings.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench import RESULTS
from bench.harness import datagen
from bench.harness.datagen import SCHEMA, UID_HEADER

BATCH = 500
_BEFORE = {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "4",
           "spark.databricks.delta.snapshotPartitions": "4",
           "spark.sql.ui.explainMode": "formatted"}  # ingest's local defaults before the probe
_CHOSEN = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "2",
           "spark.databricks.delta.snapshotPartitions": "2",
           "spark.sql.ui.explainMode": "formatted"}  # LOCAL_DEFAULTS on 2 cores, before the explain mode
VARIANTS = {  # each complete in the keys it is compared on, whatever the session's defaults
    "before (AQE on, shuffle 4, snapshot 4)": _BEFORE,
    "AQE off": {**_BEFORE, "spark.sql.adaptive.enabled": "false"},
    "shuffle 1": {**_BEFORE, "spark.sql.shuffle.partitions": "1"},
    "shuffle 2": {**_BEFORE, "spark.sql.shuffle.partitions": "2"},
    "snapshot 1": {**_BEFORE, "spark.databricks.delta.snapshotPartitions": "1"},
    "AQE off, shuffle 2, snapshot 2": _CHOSEN,
    "stats on _uid only": {**_CHOSEN, "spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols": "1"},
    "chosen, and no broadcast join": {**_CHOSEN, "spark.sql.autoBroadcastJoinThreshold": "-1"},
    "chosen, and plans explained simply": {**_CHOSEN, "spark.sql.ui.explainMode": "simple"},
}
KAFKA_SCHEMA = ("topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, key BINARY, value BINARY, "
                "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")


def batches(spark, count: int, records: int = BATCH) -> list:
    import random

    rnd, make_uid, frames = random.Random(5), datagen.Uuid7(), []
    for b in range(count):
        rows = []
        for i in range(records):
            uid = make_uid()
            rows.append(("bench", i % 2, b * records + i, None, None,
                         bytearray(datagen.payload(uid, int(time.time() * 1000), rnd)),
                         [(UID_HEADER, bytearray(uid.encode()))]))
        frames.append(spark.createDataFrame(rows, KAFKA_SCHEMA).cache())
        frames[-1].count()  # the batch's rows are at hand, as Kafka's would be: not the measure
    return frames


def jobs(spark) -> int:
    return spark.sparkContext._jsc.sc().statusStore().jobsList(None).size()


def job_names(spark, count: int) -> list[str]:
    """The call sites of the last `count` jobs: where a batch's jobs come from."""
    listed = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    found = [listed.apply(i) for i in range(listed.size())]
    found.sort(key=lambda job: job.jobId())
    return [f"{job.name()} | {job.description().getOrElse(None) if job.description().isDefined() else ''}"[:160]
            for job in found[-count:]]


def ingest_side(spark, root: Path):
    from ingest.batch.processor import BatchProcessor, payload_schema
    from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

    checkpoint = root / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    pipeline = Pipeline(name="bench", source=Source(kafka=KafkaSource("unused:9092", ("bench",)), format="json",
                                                    schema=SCHEMA),
                        uid=Uid(header=UID_HEADER), target=Target(path=str(root / "target")),
                        checkpoint=str(checkpoint), dead_letter=DeadLetter(path=str(root / "dead")))
    processor = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=lambda report: None)
    processor.position.topic_ids = {"bench": "bench-id"}  # no broker here: the topic id is not what is measured
    return processor


def append_side(spark, root: Path, txn_app_id: str | None = None):
    """A plain Delta append of the decoded batch; under a txn id (the batch id its version) when
    `txn_app_id` is given, as Delta's streaming sink writes."""
    from pyspark.sql import functions as F

    from ingest.batch.formats.decode import decode
    from ingest.batch.merge.target import target_rows
    from ingest.batch.staged import STAGE
    from ingest.batch.uid import with_uid
    from ingest.spec.model import Uid

    schema = spark.createDataFrame([], SCHEMA).schema
    target = str(root / "target")

    def append(batch, batch_id: int) -> None:
        staged = with_uid(decode(batch, "json", schema), Uid(header=UID_HEADER))
        writer = target_rows(staged.where(F.col(STAGE).isNull())).write.format("delta").mode("append")
        if txn_app_id is not None:
            writer = writer.option("txnAppId", txn_app_id).option("txnVersion", batch_id)
        writer.save(target)
    return append


def measure(spark, frames, settings: dict, work: Path) -> dict:
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        sides = {"ingest": ingest_side(spark, work / "ingest"), "plain_append": append_side(spark, work / "append")}
        figures = {side: {"ms": [], "jobs": []} for side in sides}
        for batch_id, frame in enumerate(frames):
            for side in (sides if batch_id % 2 == 0 else dict(reversed(sides.items()))):
                before, began = jobs(spark), time.perf_counter()
                sides[side](frame, batch_id)
                figures[side]["ms"].append((time.perf_counter() - began) * 1000)
                figures[side]["jobs"].append(jobs(spark) - before)
                if side == "ingest":
                    last_jobs = job_names(spark, figures[side]["jobs"][-1])
        out = {"last_ingest_batch_jobs": last_jobs}
        for side, f in figures.items():  # the first two batches create the tables: not a steady batch
            out[side] = {"median_ms": round(statistics.median(f["ms"][2:])),
                         "jobs_per_batch": statistics.median(f["jobs"][2:])}
        out["ratio"] = round(out["ingest"]["median_ms"] / out["plain_append"]["median_ms"], 2)
        return out
    finally:
        for key, value in saved.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def _load() -> str:
    with open("/proc/loadavg") as load:
        return " ".join(load.read().split()[:3])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run batch_settings", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--out", type=Path, default=RESULTS / "batch_settings.json")
    parser.add_argument("--only", help="comma-separated numbers of the variants to run (1 = defaults)")
    args = parser.parse_args(argv)
    from ingest.platform.session import get_session

    spark = get_session("bench-batch-settings", master="local[2]",
                        conf={"spark.ui.retainedJobs": "100000", "spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    frames = batches(spark, args.batches)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-settings-"))
    results = {"batch_records": BATCH, "batches": args.batches, "variants": {}}
    try:
        measure(spark, frames[:4], {}, work / "warm-up")  # JIT and class loading belong to no variant
        chosen = [int(n) for n in args.only.split(",")] if args.only else range(1, len(VARIANTS) + 1)
        for name, settings in [list(VARIANTS.items())[n - 1] for n in chosen]:
            results["variants"][name] = {"settings": settings,
                                         **measure(spark, frames, settings, work / uuid.uuid4().hex),
                                         "batches": args.batches, "load_average": _load()}
            shown = {k: v for k, v in results["variants"][name].items() if k != "last_ingest_batch_jobs"}
            print(f"{name:40} {json.dumps(shown)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out.exists():  # a run of some variants keeps the figures of the others
        earlier = json.loads(args.out.read_text())
        results["variants"] = {**earlier.get("variants", {}), **results["variants"]}
        results["note"] = earlier.get("note", "")
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
