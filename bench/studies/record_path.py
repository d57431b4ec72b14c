"""Where a record's time goes: one 50,000-record batch of ingest's batch function, stage by
stage, insert_only and upsert (issue #53), and settings side by side (`--conf`).

One SparkSession (local[2], ingest's local defaults), no broker: the batches are Kafka-shaped
frames cached in memory (`batch_settings`'s shape: the bench's JSON events with a `message-id`
header, 2 partitions, 2% re-sends of a recent record with the same uid and payload at a new
offset); after the first batch, a tenth of each batch re-sends an earlier batch's uid with a
later `ts` (the upsert's updates; `order_by: ts`). Each repetition runs one batch per mode and
per variant (as is; with the `--conf` settings, if any, on the session for the whole batch),
alternating, each into its own table.

A batch's stages are lazy and fused in Spark, so each is measured as the difference of
cumulative passes over the same cached Kafka rows into the `noop` sink: decode, then with the
uid, then with the one-row-per-uid mark (dedup). Then the batch itself, as the processor runs
it: the cache filled (by a count: the processor fills it in the summary's job), the summary's
aggregation over it, and the MERGE under the batch's txn id. The MERGE's parts come from
Spark's SQL metrics of its executions (the status store: no UI, no REST): rows, shuffle bytes,
sort time and spill per operator, Delta's own scan and rewrite times, and the commit as the
MERGE's wall time past Delta's execution time. CPU is the driver JVM's plus this process's
(local mode: all of Spark). Usage:

    bench/run record_path [--records 50000] [--reps 3] [--conf KEY=VALUE ...] [--variant NAME ...]
                          [--out bench/results/record_path.json]

`--variant NAME` adds a leg, before today's, that runs the code as it was before a lever
(`record_levers.BEFORE`); the CPU ratio column reads the last leg / the first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

from bench import RESULTS
from bench.harness import datagen
from bench.harness.datagen import SCHEMA, UID_HEADER
from bench.harness.meter import Meter
from bench.studies.record_levers import BEFORE

KAFKA_SCHEMA = ("topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, key BINARY, value BINARY, "
                "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
MODES = ("insert_only", "upsert")

STAGES = ("decode", "uid", "dedup", "cache build", "summary", "MERGE", "next state (background)")
# the SQL metrics the table sums per operator kind (Spark's and Delta's own names)
OPERATOR_METRICS = ("number of output rows", "shuffle bytes written", "shuffle records written",
                    "local bytes read", "remote bytes read", "sort time", "spill size", "peak memory",
                    "scan time", "time in aggregation build", "data size", "number of written files",
                    "written output")
_EPOCH = datetime(2026, 11, 28)


def batches(spark, records: int, count: int) -> list:
    """`count` Kafka-shaped batches; batch n > 0 re-sends (later `ts`) a tenth of batch n-1's uids."""
    rnd, make_uid, frames, previous = random.Random(53), datagen.Uuid7(), [], []
    offset = 0
    for b in range(count):
        rows, recent, uids = [], [], []
        for i in range(records):
            ts_ms = int((_EPOCH + timedelta(seconds=b * records + i)).timestamp() * 1000)
            if recent and rnd.random() < datagen.DUPLICATE_SHARE:
                uid, value = rnd.choice(recent[-200:])  # a producer's retry: same uid and payload
            elif previous and rnd.random() < 0.1:
                uid = rnd.choice(previous)  # a newer version of an earlier record
                value = datagen.payload(uid, ts_ms, rnd)
            else:
                uid = make_uid()
                value = datagen.payload(uid, ts_ms, rnd)
            recent.append((uid, value))
            uids.append(uid)
            rows.append(("bench", i % 2, offset, _EPOCH + timedelta(milliseconds=offset), None, bytearray(value),
                         [(UID_HEADER, bytearray(uid.encode()))]))
            offset += 1
        previous = uids
        frame = spark.createDataFrame(rows, KAFKA_SCHEMA).repartition(2, "partition").cache()
        frame.count()  # the batch's rows at hand, as Kafka's would be: not the measure
        frames.append(frame)
    return frames


def processor(spark, root: Path, mode: str):
    from ingest.batch.processor import BatchProcessor, payload_schema
    from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

    checkpoint = root / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    target = Target(path=str(root / "target"), mode=mode, order_by="ts" if mode == "upsert" else None)
    pipeline = Pipeline(name=f"bench-{mode}", source=Source(kafka=KafkaSource("unused:9092", ("bench",)),
                                                            format="json", schema=SCHEMA),
                        uid=Uid(header=UID_HEADER), target=target, checkpoint=str(checkpoint),
                        dead_letter=DeadLetter(path=str(root / "dead")))
    made = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=lambda report: None)
    made.position.topic_ids = {"bench": "bench-id"}  # no broker here: the topic id is not what is measured
    return made


class StatusStore:
    """The SQL executions Spark's status store keeps, read through py4j (no UI, no REST)."""

    def __init__(self, spark):
        self.store = spark._jsparkSession.sharedState().statusStore()
        self.seen = self._last()

    def _last(self) -> int:
        listed = self.store.executionsList()
        return max((listed.apply(i).executionId() for i in range(listed.size())), default=-1)

    def since(self) -> list[dict]:
        """Executions since the last call: per plan node, its name and metrics."""
        listed = self.store.executionsList()
        found = [listed.apply(i) for i in range(listed.size())]
        fresh = sorted((e for e in found if e.executionId() > self.seen), key=lambda e: e.executionId())
        self.seen = max([self.seen] + [e.executionId() for e in fresh])
        out = []
        for execution in fresh:
            ident = execution.executionId()
            values = self.store.executionMetrics(ident)
            nodes = self.store.planGraph(ident).allNodes()
            described = []
            for n in range(nodes.size()):
                node = nodes.apply(n)
                metrics = {}
                listed_metrics = node.metrics()
                for m in range(listed_metrics.size()):
                    metric = listed_metrics.apply(m)
                    value = values.get(metric.accumulatorId())
                    if value.isDefined():
                        metrics[metric.name()] = value.get()
                described.append({"node": node.name(), "metrics": metrics})
            out.append({"id": ident, "description": execution.description()[:120], "nodes": described})
        return out


def number(text: str) -> float:
    """The first figure of a metric's text ('total (min, med, max ...)\\n12.3 MiB (...)'), in
    bytes, ms or a count."""
    units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    line = text.strip().splitlines()[-1] if "\n" in text else text.strip()
    parts = line.replace(",", "").split()
    try:
        value = float(parts[0])
    except (IndexError, ValueError):
        return 0.0
    return value * units.get(parts[1], 1) if len(parts) > 1 else value


def operators(executions: list[dict]) -> dict[str, dict[str, float]]:
    """OPERATOR_METRICS summed per operator kind over `executions`."""
    summed: dict[str, dict[str, float]] = {}
    for execution in executions:
        for node in execution["nodes"]:
            kind = node["node"].split(" ")[0] if not node["node"].startswith("Execute") else node["node"]
            for name, text in node["metrics"].items():
                if name in OPERATOR_METRICS or node["node"].startswith("Execute"):
                    slot = summed.setdefault(kind, {})
                    slot[name] = slot.get(name, 0.0) + number(text)
    return summed


@contextmanager
def settings(spark, confs: dict[str, str]) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


@contextmanager
def patched(lever: str | None) -> Iterator[None]:
    """The code as it was before `lever`, for one leg (None: as it is)."""
    with BEFORE[lever]() if lever else nullcontext():
        yield


def jobs(spark) -> int:
    return spark.sparkContext._jsc.sc().statusStore().jobsList(None).size()


def _noop(frame) -> None:
    frame.write.format("noop").mode("overwrite").save()


def measured(spark, step) -> dict:
    with Meter(spark) as meter:
        result = step()
    assert meter.usage is not None
    return {"wall_ms": meter.usage.seconds * 1000, "cpu_ms": meter.usage.cpu_seconds * 1000, "result": result}


def one_batch(spark, made, frame, batch_id: int, store: StatusStore) -> dict:
    """The cumulative passes, then the batch as the processor runs it, each stage metered."""
    from ingest.batch.processor import staged_records, summarize
    from ingest.platform.caching import kept

    pipeline, out = made.pipeline, {}
    cumulative = {
        "decode": lambda: _noop(made._decode(frame)),
        "uid": lambda: _noop(staged_records(made._decode(frame), pipeline)),
        "dedup": lambda: _noop(made._merge_source(staged_records(made._decode(frame), pipeline))),
    }
    before = {"wall_ms": 0.0, "cpu_ms": 0.0}
    for stage, step in cumulative.items():
        step()  # once untimed: the pass right after a MERGE pays for its caches and JIT
        store.since()
        got = measured(spark, step)
        out[stage] = {k: got[k] - before[k] for k in ("wall_ms", "cpu_ms")}
        out[stage]["sql"] = operators(store.since())
        before = {k: got[k] for k in ("wall_ms", "cpu_ms")}
    session = frame.sparkSession
    with ExitStack() as held:
        staged = made._transform_and_uid(made._decode(frame), failed=())
        source = kept(made._merge_source(staged), held)
        store.since()
        got = measured(spark, source.count)
        out["cache build"] = {k: got[k] - before[k] for k in ("wall_ms", "cpu_ms")}
        out["cache build"]["sql"] = operators(store.since())
        jobs_before = jobs(spark)
        got = measured(spark, lambda: summarize(source, pipeline))
        summary = got["result"]
        out["summary"] = {"wall_ms": got["wall_ms"], "cpu_ms": got["cpu_ms"], "sql": operators(store.since())}
        made._target_made()
        position = made.position.batch(session, batch_id, summary)
        position.check_replay(session)
        rows = made._rows(session, source)
        made._claim_target(session, rows)  # the table state's warmer started, the owner checked
        got = measured(spark, lambda: made._merge(session, rows, summary, position))
        executions = store.since()
        out["jobs"] = jobs(spark) - jobs_before
        out["MERGE"] = {"wall_ms": got["wall_ms"], "cpu_ms": got["cpu_ms"], "sql": operators(executions),
                        "inserted": got["result"].inserted, "updated": got["result"].updated,
                        "executions": [e["description"] for e in executions]}
    # the next table state, which the processor computes on a thread beside the next batch:
    # waited for here, so its CPU is not charged to the next leg's stages
    got = measured(spark, made.settle)
    out["next state (background)"] = {"wall_ms": got["wall_ms"], "cpu_ms": got["cpu_ms"]}
    out["read"], out["unique"] = summary.read, summary.unique
    return out


def _median_stage(runs: list[dict], mode: str, variant: str, stage: str, key: str) -> float:
    return statistics.median(r["stages"][stage][key] for r in runs if r["mode"] == mode and r["variant"] == variant)


def table(runs: list[dict], records: int, mode: str, variants: list[str]) -> list[str]:
    """One mode's stages per variant (wall and CPU, medians), and CPU's ratio to the first variant."""
    lines = [f"{mode}: | stage | " + " | ".join(f"{v} wall ms | CPU ms" for v in variants)
             + (" | CPU ratio |" if len(variants) > 1 else " |"),
             "| --- |" + " ---: | ---: |" * len(variants) + (" ---: |" if len(variants) > 1 else "")]
    totals = {v: [0.0, 0.0] for v in variants}
    for stage in STAGES:
        cells = []
        for variant in variants:
            wall = _median_stage(runs, mode, variant, stage, "wall_ms")
            cpu = _median_stage(runs, mode, variant, stage, "cpu_ms")
            if "background" not in stage:  # beside the next batch, not on this one's path
                totals[variant][0] += wall
                totals[variant][1] += cpu
            cells += [f"{wall:,.0f}", f"{cpu:,.0f}"]
        if len(variants) > 1:
            first = _median_stage(runs, mode, variants[0], stage, "cpu_ms")
            other = _median_stage(runs, mode, variants[-1], stage, "cpu_ms")
            cells.append(f"{other / first:.2f}" if first > 0 else "")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    cells = [f"{figure:,.0f}" for wall_cpu in totals.values() for figure in wall_cpu]
    if len(variants) > 1:
        cells.append(f"{totals[variants[-1]][1] / totals[variants[0]][1]:.2f}")
    lines.append("| the batch's path (without the background) | " + " | ".join(cells) + " |")
    for variant, (_, cpu) in totals.items():
        got = [r["stages"]["jobs"] for r in runs if r["mode"] == mode and r["variant"] == variant]
        lines.append(f"{variant}: {cpu * 1000 / records:.1f} µs CPU a record, "
                     f"{statistics.median(got)} jobs (summary and MERGE)")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE: a variant with these settings")
    parser.add_argument("--variant", action="append", default=[], choices=sorted(BEFORE),
                        help="a leg with the code as it was before this lever (record_levers.BEFORE)")
    parser.add_argument("--out", type=Path, default=RESULTS / "record_path.json")
    args = parser.parse_args(argv)
    from ingest.platform.session import get_session

    spark = get_session("bench-record-path", master="local[2]",
                        conf={"spark.driver.memory": "3g", "spark.ui.enabled": "false"})
    load_before = os.getloadavg()[0]
    confs = dict(item.split("=", 1) for item in args.conf)
    before = {f"before {lever}": lever for lever in args.variant}
    variants = {**{name: {} for name in before}, "as is": {},
                **({", ".join(f"{k}={v}" for k, v in confs.items()): confs} if confs else {})}
    frames = batches(spark, args.records, args.reps + 1)
    runs = []
    with tempfile.TemporaryDirectory() as work:
        made = {(mode, variant): processor(spark, Path(work) / f"{mode}-{n}", mode)
                for mode in MODES for n, variant in enumerate(variants)}
        legs = list(made)
        for batch_id, frame in enumerate(frames):
            for mode, variant in (legs if batch_id % 2 == 0 else reversed(legs)):
                with settings(spark, variants[variant]), patched(before.get(variant)):
                    stages = one_batch(spark, made[(mode, variant)], frame, batch_id, StatusStore(spark))
                if batch_id == 0:  # creates the table: not a steady batch
                    continue
                runs.append({"mode": mode, "variant": variant, "batch": batch_id, "stages": stages})
                print(f"batch {batch_id} {mode} {variant} ({stages['jobs']} jobs): " + ", ".join(
                    f"{s} {stages[s]['wall_ms']:.0f}/{stages[s]['cpu_ms']:.0f} ms" for s in STAGES), flush=True)
    lines = [line for mode in MODES for line in table(runs, args.records, mode, list(variants))]
    print("\n".join(lines))
    args.out.write_text(json.dumps({"records": args.records, "reps": args.reps,
                                    "load_average": [load_before, os.getloadavg()[0]],
                                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                    "variants": variants, "runs": runs, "table": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
