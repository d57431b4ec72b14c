"""Where a change's time goes: one batch of Debezium changes through ingest's batch function and
through the textbook foreachBatch MERGE, stage by stage, side by side (issue #53, P2).

    bench/run cdc_path [--keys 100000] [--records 25000] [--reps 2] [--variant NAME ...]

`bench/run cdc_peer` measures the two whole runs; this measures one batch of each, as
`record_path` does for insert_only and upsert: one SparkSession (local[2], driver 3 GB), no
broker, the batches Kafka-shaped frames cached in memory, cut from cdc_peer's stream (the
same changes, keys and tombstones; `records` records a batch, 2 partitions). Each leg starts
from its own copy of cdc_peer's table of `keys` rows and takes the same batches in turn, legs
alternating; the first batch is left out (it warms both and makes ingest's table state).

ingest    `record_path.one_batch` on a `BatchProcessor` of cdc_peer's pipeline: decode (the
          envelope), uid, the one-row-per-uid mark, the cache filled, the summary, the MERGE
          (each key's last change by sequence and position, then the MERGE under the txn id),
          and the next table state the processor computes beside the next batch
textbook  the envelope parsed, each key's latest change by `row_number()`, then the MERGE;
          parse and rank are cumulative passes into the `noop` sink, and the MERGE (which
          computes its source again: nothing is cached) is counted past them

`--variant NAME` adds an ingest leg beside ingest as it is (`ingest:NAME`, its own copy of the
table and its own processor, in the same rotation): a lever measured before -> after in one run.
The variants (VARIANTS): `dv-off`, the leg's table with deletion vectors off (ingest makes a cdc
target with them on); `ranked-twice`, ingest before `changes.mark_last` (the batch ranked once for
the unique count and again for the MERGE).

CPU is the driver JVM's plus this process's. It prints the table and writes
`results/cdc_path.json` (every run, the SQL metrics per operator, the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterator

from bench import RESULTS
from bench.harness.cdc_stream import Change, Shape, change_stream
from bench.studies import cdc_peer, record_path

TOPIC = "bench"  # record_path's processor's topic
TEXTBOOK_STAGES = ("parse", "rank", "MERGE")
_EPOCH = datetime(2026, 12, 1)


@dataclass(frozen=True)
class Variant:
    """An ingest leg beside ingest as it is: its table's properties set before its first
    batch, and `patched` (code swapped in for its batches only) around each of its batches."""

    about: str
    properties: dict[str, str] = field(default_factory=dict)
    patched: Callable[[], AbstractContextManager] = nullcontext


@contextmanager
def _ranked_twice() -> Iterator[None]:
    """ingest before `changes.mark_last`: KEEP on each key's first record in Kafka order (for the
    unique count alone), then the MERGE's rows ranked again by sequence and position."""
    from ingest.batch import processor
    from ingest.batch.merge import changes
    from ingest.batch.staged import KEEP
    from ingest.batch.uid import mark_one_per_uid

    mark_kept, change_rows = processor.mark_kept, changes.change_rows
    processor.mark_kept = lambda records, pipeline: mark_one_per_uid(records, "insert_only", None)
    changes.change_rows = lambda records, pipeline: change_rows(records.drop(KEEP), pipeline)
    try:
        yield
    finally:
        processor.mark_kept, changes.change_rows = mark_kept, change_rows


VARIANTS = {
    "dv-off": Variant("its table with deletion vectors off", {"delta.enableDeletionVectors": "false"}),
    "ranked-twice": Variant("before changes.mark_last: a window for the unique count, another for the MERGE",
                            patched=_ranked_twice),
}


def legs_of(variants: list[str]) -> tuple[str, ...]:
    return ("ingest", *(f"ingest:{name}" for name in variants), "textbook")


def variant_of(leg: str) -> Variant | None:
    return VARIANTS[leg.split(":", 1)[1]] if ":" in leg else None


def change_frames(spark, changes: list[Change], records: int, count: int) -> list:
    """`count` Kafka-shaped frames of `records` records each, cut from the stream in order (a
    tombstone after each delete, offsets per partition as a broker gives them)."""
    rows, offsets = [], [0] * cdc_peer.PARTITIONS
    for change in changes:
        for value in (change.value(), None) if change.op == "d" else (change.value(),):
            partition = change.key % cdc_peer.PARTITIONS
            rows.append((TOPIC, partition, offsets[partition],
                         _EPOCH + timedelta(milliseconds=len(rows)), bytearray(change.message_key()),
                         None if value is None else bytearray(value), []))
            offsets[partition] += 1
    if len(rows) < records * count:
        raise ValueError(f"the stream holds {len(rows)} records, {records * count} asked for")
    frames = []
    for n in range(count):
        frame = (spark.createDataFrame(rows[n * records:(n + 1) * records], record_path.KAFKA_SCHEMA)
                 .repartition(cdc_peer.PARTITIONS, "partition").cache())
        frame.count()  # the batch's rows at hand, as Kafka's would be: not the measure
        frames.append(frame)
    return frames


def ingest_processor(spark, root: Path, target: str):
    from ingest.batch.processor import BatchProcessor, payload_schema

    checkpoint = root / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    pipeline = cdc_peer.ingest_pipeline("unused:9092", TOPIC, root, target, None)
    made = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=lambda report: None)
    made.position.topic_ids = {TOPIC: "bench-id"}  # no broker here: the topic id is not what is measured
    return made


def _noop(frame) -> None:
    frame.write.format("noop").mode("overwrite").save()


def textbook_batch(spark, table, frame, store) -> dict:
    """The textbook's steps as cumulative passes, then its MERGE past them."""
    out, before = {}, {"wall_ms": 0.0, "cpu_ms": 0.0}
    for stage, step in (("parse", lambda: _noop(cdc_peer.textbook_parsed(frame))),
                        ("rank", lambda: _noop(cdc_peer.textbook_changes(frame)))):
        step()  # once untimed, as record_path does
        store.since()
        got = record_path.measured(spark, step)
        out[stage] = {k: got[k] - before[k] for k in ("wall_ms", "cpu_ms")}
        out[stage]["sql"] = record_path.operators(store.since())
        before = {k: got[k] for k in ("wall_ms", "cpu_ms")}
    got = record_path.measured(spark, lambda: cdc_peer.textbook_merge(table, cdc_peer.textbook_changes(frame)))
    executions = store.since()
    out["MERGE"] = {k: got[k] - before[k] for k in ("wall_ms", "cpu_ms")}
    out["MERGE"]["sql"] = record_path.operators(executions)
    out["MERGE"]["executions"] = [e["description"] for e in executions]
    out["path"] = {k: got[k] for k in ("wall_ms", "cpu_ms")}  # the MERGE computes its source itself
    return out


def ingest_path(stages: dict) -> dict:
    """The batch's path without the background: the cumulative stages and the MERGE."""
    on_path = [s for s in record_path.STAGES if "background" not in s]
    return {k: sum(stages[s][k] for s in on_path) for k in ("wall_ms", "cpu_ms")}


def table(runs: list[dict], records: int, legs: tuple[str, ...] = cdc_peer.LEGS) -> list[str]:
    lines = ["| leg | stage | wall ms | CPU ms | µs CPU a record |", "| --- | --- | ---: | ---: | ---: |"]
    for leg in legs:
        stages = TEXTBOOK_STAGES if leg == "textbook" else record_path.STAGES
        mine = [r["stages"] for r in runs if r["leg"] == leg]
        for stage in (*stages, "path"):
            wall = statistics.median(s[stage]["wall_ms"] for s in mine)
            cpu = statistics.median(s[stage]["cpu_ms"] for s in mine)
            name = "the batch's path" if stage == "path" else stage
            lines.append(f"| {leg} | {name} | {wall:,.0f} | {cpu:,.0f} | {cpu * 1000 / records:.1f} |")
    paths = {leg: statistics.median(r["stages"]["path"]["cpu_ms"] for r in runs if r["leg"] == leg)
             for leg in legs}
    lines.append(f"CPU of a batch's path, textbook / ingest: {paths['textbook'] / paths['ingest']:.2f} "
                 "(a batch's P2 by CPU; the whole run's P2 is `bench/run cdc_peer`)")
    for leg in legs[1:-1]:
        lines.append(f"CPU of a batch's path, {leg} / ingest: {paths[leg] / paths['ingest']:.2f}; "
                     f"textbook / {leg}: {paths['textbook'] / paths[leg]:.2f}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run cdc_path", description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=25_000, help="records a batch")
    parser.add_argument("--reps", type=int, default=2, help="steady batches a leg (after the first)")
    parser.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS),
                        help="an ingest leg more, with this change (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS / "cdc_path.json")
    args = parser.parse_args(argv)
    from delta.tables import DeltaTable

    from bench.harness.runner import spark_session

    spark = spark_session()
    load_before = os.getloadavg()[0]
    count = args.reps + 1
    changes = change_stream(Shape(keys=args.keys, changes=args.records * count, resend_lag=args.records))
    frames = change_frames(spark, changes, args.records, count)
    runs = []
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        target = cdc_peer.ingest_pipeline("unused:9092", TOPIC, root, "", None).target
        initial = cdc_peer.build_tables(spark, root, args.keys, max(1, args.keys // cdc_peer.ROWS_PER_FILE), target)
        legs = legs_of(args.variant)
        tables = {leg: str(root / f"{leg.replace(':', '-')}-target") for leg in legs}
        made = {}
        for leg, path in tables.items():
            shutil.copytree(initial["textbook" if leg == "textbook" else "ingest"], path)
            variant = variant_of(leg)
            if variant is not None and variant.properties:
                listed = ", ".join(f"'{k}' = '{v}'" for k, v in variant.properties.items())
                spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({listed})")
            if leg != "textbook":
                made[leg] = ingest_processor(spark, root / leg.replace(":", "-"), path)
        textbook = DeltaTable.forPath(spark, tables["textbook"])
        for batch_id, frame in enumerate(frames):
            for leg in legs if batch_id % 2 == 0 else legs[::-1]:
                store = record_path.StatusStore(spark)
                if leg != "textbook":
                    variant = variant_of(leg)
                    with variant.patched() if variant is not None else nullcontext():
                        stages = record_path.one_batch(spark, made[leg], frame, batch_id, store)
                    stages["path"] = ingest_path(stages)
                else:
                    stages = textbook_batch(spark, textbook, frame, store)
                print(f"batch {batch_id} {leg}: path {stages['path']['wall_ms']:,.0f} ms wall, "
                      f"{stages['path']['cpu_ms']:,.0f} ms CPU", flush=True)
                if batch_id:
                    runs.append({"leg": leg, "batch": batch_id, "stages": stages})
    lines = table(runs, args.records, legs)
    print("\n".join(lines))
    args.out.write_text(json.dumps({"keys": args.keys, "records": args.records, "reps": args.reps,
                                    "variants": {name: VARIANTS[name].about for name in args.variant},
                                    "load_average": [load_before, os.getloadavg()[0]],
                                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "runs": runs, "table": lines}, indent=1, default=str) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
