"""P2: one Debezium change stream through ingest's `cdc` pipeline and through the textbook
`foreachBatch` MERGE a Spark user writes by hand, side by side (issue #53).

    bench/run cdc_peer [--quick | --smoke] [--reps 3] [--keys N --changes N --max-offsets N]

The stream (`change_stream`, pure Python): a table of `keys` customers (ids from FIRST_ID, one
row each, in place before the stream), then `changes` Debezium envelopes (Postgres: the
position is `source.lsn`): a tenth creates of new keys, the rest changes to existing keys,
half of them spread over the whole table and half to the newest keys (the hot rows); a live
key is updated or, one time in ten, deleted, a deleted key created again; every delete is
followed by Debezium's tombstone. A share of the sends are **out-of-order re-sends**: an
earlier change, unchanged, sent again after its key has changed since (a connector that
restarts re-sends from its last committed offset), at least `max_offsets` sends after the
original, so it mostly lands in a later batch than the newer change.

Two legs over the same topic, one Spark application (`local[2]`, driver 3 GB) and one
embedded broker, the same Kafka options (read_committed, `max_offsets_per_trigger`), the
available-now trigger, alternating order each repetition, each into a fresh copy of its
initial table (built once with the same rows in the same number of files):

ingest    `ingest.stream.query.start_query`, what `ingest run --once` starts (JSON, `cdc:
          {key: [id]}`, upsert, soft deletes), then the processor settled as `ingest run`
          does when its query ends; its initial table made by ingest's own `create_table`
textbook  Delta's documented pattern: parse the envelope, the latest change per key by
          `row_number()` over the key ordered by `source.lsn` descending, then one
          `DeltaTable.merge` on the key: whenMatchedDelete for deletes, whenMatchedUpdateAll,
          whenNotMatchedInsertAll for the rest (a plain table of the row's columns)

P2 is ingest's changes per second over the textbook's within a repetition, the median over
repetitions (goal >= 1.0). Cost: CPU seconds of the driver JVM and this process (local mode:
all of Spark; the broker is not counted) per million records. Each side's final table is
checked against the state the stream should leave (`expected_state`: each key's change with
the highest position), and the keys it got wrong are counted; the textbook's table is also
checked against `textbook_state`, what its method leaves given the batches Spark cut, so its
wrong keys are the method's, not the bench's. Results: bench/results/cdc_peer.json and the
`cdc_peer` section of bench/results/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench import BENCH, RESULTS
from bench.harness.cdc_stream import (
    FIRST_ID,
    INITIAL_TIER,
    ROW,
    ROW_COLUMNS,
    Change,
    Sent,
    Shape,
    change_stream,
    expected_state,
    offset_ranges,
    stream_figures,
    textbook_state,
    wrong_keys,
)
from bench.harness.legs import finished

PARTITIONS = 2
ROWS_PER_FILE = 25_000  # the initial tables' files: cdc_merge's 1M rows in 40 files
LEGS = ("ingest", "textbook")


# --- the figures -----------------------------------------------------------------------------


def _median(values: Iterable[float | None]) -> float | None:
    chosen = [v for v in values if v is not None]
    return round(statistics.median(chosen), 3) if chosen else None


def summarize(runs: Sequence[dict]) -> dict:
    """P2 per repetition and its median; each leg's medians."""
    by_rep: dict[int, dict[str, dict]] = {}
    for run in runs:
        by_rep.setdefault(run["rep"], {})[run["leg"]] = run
    p2 = [round(legs["ingest"]["changes_per_second"] / legs["textbook"]["changes_per_second"], 3)
          for _, legs in sorted(by_rep.items()) if set(LEGS) <= set(legs)]
    legs = {}
    for leg in LEGS:
        mine = [r for r in runs if r["leg"] == leg]
        legs[leg] = {figure: _median(r[figure] for r in mine)
                     for figure in ("seconds", "changes_per_second", "cpu_seconds_per_million", "rss_peak_mb",
                                    "batches", "settle_seconds")}
        legs[leg]["keys_wrong"] = [r["wrong"]["keys"] for r in mine]
    return {"P2": _median(p2), "P2_per_rep": p2, "goal": 1.0, "legs": legs}


def _figure(value: float | None, spec: str) -> str | None:
    return None if value is None else format(value, spec)


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
            + ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |" for row in rows])


def text_report(results: dict) -> str:
    from bench.harness.report import machine_lines

    summary, stream, scale = results["summary"], results["stream"], results["scale"]
    name = {"quick": " --quick", "smoke": " --smoke"}.get(scale["name"], "")
    lines = [f"### `bench/run cdc_peer{name}`, {results['started_at']}, {results['elapsed_seconds'] / 60:.1f} min", ""]
    lines += machine_lines(results["machine"])
    lines += [f"- the table: {stream['keys']:,} keys in {scale['files']} files before the stream, each side in "
              "its own layout (ingest's: `_uid`, the row, `_sequence`, `_op`, the Kafka coordinates, "
              "`_deleted`; the textbook's: the row)",
              f"- the stream: {stream['changes']:,} changes ({stream['creates']:,} creates, {stream['updates']:,} "
              f"updates, {stream['deletes']:,} deletes, {stream['resent']:,} out-of-order re-sends of "
              f"{stream['resent_keys']:,} keys) and {stream['tombstones']:,} tombstones: {results['records']:,} "
              f"records in {PARTITIONS} partitions, {stream['keys_changed']:,} keys changed "
              f"({stream['new_keys']:,} new); max_offsets_per_trigger {scale['max_offsets']:,}; "
              f"{results['reps']} repetitions, legs alternating", ""]
    p2 = summary["P2"]
    verdict = "met" if p2 is not None and p2 >= summary["goal"] else "missed"
    lines += _table(["ratio", "what", "median", "per repetition", "goal", ""],
                    [["P2", "changes/s of ingest / the textbook foreachBatch MERGE", _figure(p2, ".2f"),
                      ", ".join(f"{v:.2f}" for v in summary["P2_per_rep"]), ">= 1.0", verdict]]) + [""]
    legs = summary["legs"]
    expected = results["expected_live"]
    lines += _table(["leg", "median s", "changes/s", "CPU-s per M changes", "peak RSS MB", "batches",
                     f"keys wrong (of {expected:,} live), per repetition"],
                    [[leg, _figure(legs[leg]["seconds"], ".1f"), _figure(legs[leg]["changes_per_second"], ",.0f"),
                      _figure(legs[leg]["cpu_seconds_per_million"], ".1f"), _figure(legs[leg]["rss_peak_mb"], ",.0f"),
                      _figure(legs[leg]["batches"], ".0f"),
                      ", ".join(f"{n:,}" for n in legs[leg]["keys_wrong"])] for leg in LEGS]) + [""]
    textbook = [r for r in results["runs"] if r["leg"] == "textbook"]
    if textbook:
        off = [r["wrong_against_own_method"]["keys"] for r in textbook]
        lines += [f"The textbook's table against what its method leaves given the batches Spark cut "
                  f"(`textbook_state`): {', '.join(str(n) for n in off)} keys differ per repetition "
                  "(0: its wrong keys are the method's: a change re-sent in a later batch than a newer "
                  "one wins, a re-sent create or update brings a deleted row back).", ""]
    return "\n".join(lines)


# --- Spark: the tables and the legs ----------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    name: str
    keys: int
    changes: int
    max_offsets: int

    @property
    def files(self) -> int:
        return max(1, self.keys // ROWS_PER_FILE)


QUICK = Scale("quick", keys=100_000, changes=100_000, max_offsets=25_000)
FULL = Scale("full", keys=1_000_000, changes=400_000, max_offsets=100_000)
SMOKE = Scale("smoke", keys=5_000, changes=4_000, max_offsets=1_000)


def ingest_pipeline(bootstrap: str, topic: str, root: Path, target: str, max_offsets: int | None):
    from ingest.spec.model import Cdc, DeadLetter, KafkaSource, Pipeline, Source, Target, Uid

    return Pipeline(name="cdc_peer",
                    source=Source(KafkaSource(bootstrap_servers=bootstrap, topics=(topic,),
                                              max_offsets_per_trigger=max_offsets), "json", ROW),
                    uid=Uid(field="id"), target=Target(path=target, mode="upsert"),
                    checkpoint=str(root / "checkpoint"), dead_letter=DeadLetter(path=str(root / "dead_letter")),
                    cdc=Cdc(key=("id",)))


def build_tables(spark, work: Path, keys: int, files: int, target) -> dict[str, str]:
    """The table before the stream, once per side: ingest's made by its own `create_table`
    (its columns, its properties), the textbook's as a Spark user writes one; the same rows in
    `files` files in key order."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    from ingest.batch.merge.target import create_table

    rows = spark.range(FIRST_ID, FIRST_ID + keys).select(
        F.col("id"), F.concat(F.lit("name-"), "id").alias("name"),
        F.concat(F.lit("user"), "id", F.lit("@example.com")).alias("email"), F.lit(INITIAL_TIER).alias("tier"))
    ingest_rows = rows.select(
        F.col("id").cast("string").alias("_uid"), *ROW_COLUMNS, F.lit(0).cast("bigint").alias("_sequence"),
        F.lit("r").alias("_op"), F.lit("snapshot").alias("_topic"), F.lit(0).alias("_partition"),
        (F.col("id") - FIRST_ID).alias("_offset"), F.current_timestamp().alias("_kafka_timestamp"),
        F.current_timestamp().alias("_ingested_at"), F.lit(False).alias("_deleted"))
    paths = {"ingest": str(work / "initial-ingest"), "textbook": str(work / "initial-textbook")}
    # made with the columns as a batch's rows have them: nullable (a delete's row is its key alone)
    columns = StructType([StructField(f.name, f.dataType, True) for f in ingest_rows.schema.fields])
    create_table(spark, replace(target, path=paths["ingest"]), spark.createDataFrame([], columns))
    (ingest_rows.repartitionByRange(files, "_uid").sortWithinPartitions("_uid")
     .write.format("delta").mode("append").save(paths["ingest"]))
    rows.repartitionByRange(files, "id").sortWithinPartitions("id").write.format("delta").save(paths["textbook"])
    return paths


def table_properties(spark, path: str) -> dict[str, str]:
    from delta.tables import DeltaTable

    return dict(DeltaTable.forPath(spark, path).detail().first()["properties"])


def produce(config: dict, topic: str, changes: Sequence[Change]) -> Sent:
    """Each change keyed as Debezium keys it, a tombstone after each delete; where each landed
    (the broker's offsets, from the delivery reports)."""
    from confluent_kafka import Producer

    from bench.harness.datagen import producer_config

    sent = Sent()
    producer = Producer(producer_config(config))

    def landed(change: Change | None):
        def record(error, message) -> None:
            if error is not None:
                raise RuntimeError(f"not delivered to {topic}: {error}")
            sent.at[(message.partition(), message.offset())] = change
        return record

    for change in changes:
        partition = change.key % PARTITIONS
        for value in (change.value(), None) if change.op == "d" else (change.value(),):
            while True:
                try:
                    producer.produce(topic, key=change.message_key(), value=value, partition=partition,
                                     on_delivery=landed(None if value is None else change))
                    break
                except BufferError:  # the local queue is full: let librdkafka drain it
                    producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError(f"{topic}: not every change was delivered")
    return sent


IMAGE = "STRUCT<id: BIGINT, name: STRING, email: STRING, tier: STRING>"
ENVELOPE = f"before {IMAGE}, after {IMAGE}, op STRING, ts_ms BIGINT, source STRUCT<lsn: BIGINT, ts_ms: BIGINT>"


def textbook_parsed(batch):
    """Delta's documented CDC pattern, its first step: the envelope parsed, one row a change."""
    from pyspark.sql import functions as F

    return (batch.where(F.col("value").isNotNull())  # Debezium's tombstones
            .select(F.from_json(F.col("value").cast("string"), ENVELOPE).alias("e"))
            .select(F.coalesce("e.after.id", "e.before.id").alias("id"), "e.after.name", "e.after.email",
                    "e.after.tier", "e.op", F.col("e.source.lsn").alias("lsn")))


def textbook_changes(batch):
    """Its second: each key's latest change by `row_number()` over the key, newest position first."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest_first = Window.partitionBy("id").orderBy(F.col("lsn").desc())
    ranked = textbook_parsed(batch).withColumn("n", F.row_number().over(newest_first))
    return ranked.where("n = 1").drop("n")


def textbook_merge(table, latest) -> None:
    """Its third: one MERGE on the key."""
    (table.alias("t").merge(latest.alias("s"), "t.id = s.id")
     .whenMatchedDelete(condition="s.op = 'd'")
     .whenMatchedUpdateAll()
     .whenNotMatchedInsertAll(condition="s.op != 'd'")
     .execute())


def textbook_upsert(spark, target: str):
    """The foreachBatch function a Spark user writes by hand from Delta's documentation."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, target)

    def upsert(batch, batch_id: int) -> None:
        textbook_merge(table, textbook_changes(batch))
    return upsert


def _await(query) -> list[dict]:
    return [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in finished(query)]


def run_textbook(spark, pipeline, target: str) -> tuple[list[dict], float]:
    from ingest.kafka.source import read_stream

    query = (read_stream(spark, pipeline).writeStream.queryName("cdc_textbook")
             .option("checkpointLocation", pipeline.checkpoint)
             .foreachBatch(textbook_upsert(spark, target)).trigger(availableNow=True).start())
    return _await(query), 0.0


def run_ingest(spark, pipeline) -> tuple[list[dict], float]:
    """`ingest run --once` in this process: the query, then the processor settled (the next
    table state its background thread computes) as the command does when the query ends."""
    from ingest.stream.query import start_query

    query, processor = start_query(spark, pipeline, once=True)
    progress = _await(query)
    started = time.perf_counter()
    processor.settle()
    return progress, time.perf_counter() - started


def live_rows(spark, leg: str, target: str) -> list[tuple]:
    frame = spark.read.format("delta").load(target)
    if leg == "ingest":
        frame = frame.where("NOT _deleted")
    table = frame.select(*ROW_COLUMNS).toArrow()
    return list(zip(*(table.column(c).to_pylist() for c in ROW_COLUMNS), strict=True))


@dataclass
class Study:
    spark: object
    kafka: object
    work: Path
    scale: Scale
    initial: dict[str, str] = field(default_factory=dict)

    def leg(self, leg: str, topic: str, name: str, sent: Sent, expected: dict[int, tuple] | None) -> dict:
        from bench.harness.meter import Meter

        root = self.work / name
        shutil.rmtree(root, ignore_errors=True)
        target = str(root / "target")
        shutil.copytree(self.initial[leg], target)
        pipeline = ingest_pipeline(self.kafka.bootstrap, topic, root, target, self.scale.max_offsets)
        load = os.getloadavg()[0]
        with Meter(self.spark) as meter:
            progress, settle = (run_ingest(self.spark, pipeline) if leg == "ingest"
                                else run_textbook(self.spark, pipeline, target))
        usage = meter.usage
        assert usage is not None
        records = sum(p["numInputRows"] for p in progress)
        if records != len(sent.at):
            raise RuntimeError(f"{leg} read {records} records, the topic holds {len(sent.at)}")
        run = {"leg": leg, "records": records, "seconds": round(usage.seconds, 3),
               "changes_per_second": round(records / usage.seconds, 1), "cpu_seconds": round(usage.cpu_seconds, 2),
               "cpu_seconds_per_million": round(usage.cpu_seconds / records * 1e6, 2),
               "rss_peak_mb": round(usage.rss_peak_mb),
               "heap_peak_mb": usage.heap_peak_mb and round(usage.heap_peak_mb),
               "settle_seconds": round(settle, 3),
               "batches": sum(1 for p in progress if p["numInputRows"]),
               "batch_ms": [p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"]],
               "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}
        if expected is not None:
            found = live_rows(self.spark, leg, target)
            run["live_rows"] = len(found)
            run["wrong"] = wrong_keys(expected, found).figures()
            if leg == "textbook":
                own = textbook_state(self.scale.keys, sent.batches(offset_ranges(progress, topic)))
                run["wrong_against_own_method"] = wrong_keys(own, found).figures()
        shutil.rmtree(root, ignore_errors=True)
        return run


def log(text: str) -> None:
    print(text, flush=True)


def measure(args, scale: Scale) -> dict:
    from bench.harness.runner import machine, spark_session
    from ingest.kafka.local_broker import LocalKafka, create_topic

    shape = Shape(keys=scale.keys, changes=scale.changes, resend_lag=scale.max_offsets)
    warm_shape = Shape(keys=scale.keys, changes=min(2_000, scale.changes), resend_lag=200, seed=7)
    started = time.perf_counter()
    changes = change_stream(shape)
    expected = expected_state(scale.keys, changes)
    results: dict = {"scale": {**asdict(scale), "files": scale.files}, "reps": args.reps, "machine": machine(),
                     "started_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "stream": stream_figures(shape, changes), "expected_live": len(expected)}
    log(f"cdc_peer ({scale.name}): {scale.keys:,} keys, {len(changes):,} changes, "
        f"{results['stream']['resent']:,} re-sent out of order")
    work = BENCH / "work" / "cdc_peer"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with LocalKafka(work_dir=work / "kafka", start_timeout_s=300) as kafka:
        config = kafka.client_config()
        for topic in ("cdc-peer", "cdc-peer-warm-up"):
            create_topic(config, topic, partitions=PARTITIONS)
        produce_started = time.perf_counter()
        sent = produce(config, "cdc-peer", changes)
        warm_sent = produce(config, "cdc-peer-warm-up", change_stream(warm_shape))
        results["records"] = len(sent.at)
        results["produce_seconds"] = round(time.perf_counter() - produce_started, 1)
        spark = spark_session()
        study = Study(spark, kafka, work, scale)
        built = time.perf_counter()
        ingest_target = ingest_pipeline(kafka.bootstrap, "cdc-peer", work, "", scale.max_offsets).target
        study.initial = build_tables(spark, work, scale.keys, scale.files, ingest_target)
        results["build_seconds"] = round(time.perf_counter() - built, 1)
        results["table_properties"] = {leg: table_properties(spark, path) for leg, path in study.initial.items()}
        log("warm-up")
        for leg in LEGS:  # JIT and class loading belong to no leg
            study.leg(leg, "cdc-peer-warm-up", f"warm-up-{leg}", warm_sent, None)
        runs = []
        for rep in range(args.reps):
            for leg in LEGS if rep % 2 == 0 else LEGS[::-1]:
                run = {"rep": rep, **study.leg(leg, "cdc-peer", f"{leg}-{rep}", sent, expected)}
                runs.append(run)
                log(f"  {leg:8} rep {rep}: {run['seconds']:6.1f} s, {run['changes_per_second']:8,.0f} changes/s, "
                    f"CPU {run['cpu_seconds']:.0f} s, {run['batches']} batches, keys wrong {run['wrong']['keys']:,}, "
                    f"load {run['load_average'][0]:.1f}")
        spark.stop()
    results["runs"] = runs
    results["machine"]["load_end"] = round(os.getloadavg()[0], 1)
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run cdc_peer", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK.keys:,} keys, {QUICK.changes:,} changes")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that checks the study works")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of both legs (default 3)")
    parser.add_argument("--keys", type=int, help="rows of the table before the stream")
    parser.add_argument("--changes", type=int, help="changes in the stream")
    parser.add_argument("--max-offsets", type=int, help="max_offsets_per_trigger of both legs")
    parser.add_argument("--results", default="cdc_peer",
                        help="bench/results/NAME.json and the NAME section of its README.md (default cdc_peer)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    scale = SMOKE if args.smoke else QUICK if args.quick else FULL
    scale = replace(scale, keys=args.keys or scale.keys, changes=args.changes or scale.changes,
                    max_offsets=args.max_offsets or scale.max_offsets)
    results = measure(args, scale)
    results["summary"] = summarize(results["runs"])
    text = text_report(results)
    print("\n" + text)
    if not args.no_write:
        from bench.harness.report import update_readme

        (RESULTS / f"{args.results}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        update_readme(RESULTS / "README.md", text, args.results)
    shutil.rmtree(BENCH / "work" / "cdc_peer", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
