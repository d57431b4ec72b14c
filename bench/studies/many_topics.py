"""Many topics, one job: batch time against the number of topics, same total records.

    bench/run many_topics [--quick] [--topics 1,10,50] [--records N]

For each topic count N the same total of records is spread evenly over N topics
(one partition each) and read by one pattern query into a table per topic. Each
run reads the records in two batches (`max_offsets_per_trigger` = half): batch
0 creates the tables, batch 1 MERGEs into tables that exist (the steady state).
The clock times the foreachBatch call itself (what `ingest.batch.routing`
adds and spends), not the query's start.

Legs, side by side in one Spark application (`local[2]`), in alternating order:

- `one_table`: the single-table path (`BatchProcessor`) over the N=1 topic: the baseline;
- `sequential`: the per-topic router committing one table after another (threads 1);
- `parallel`: the router committing the tables on a pool of 8 driver threads.

Figures are ratios to `one_table` batch 1 and of parallel to sequential.
Results go to bench/results/many_topics.json; bench/results/README.md holds the curve.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench import RESULTS
from bench.harness.datagen import SCHEMA, UID_HEADER, payload
from ingest.batch.processor import BatchProcessor, payload_schema
from ingest.batch.routing import TopicRouter
from ingest.kafka.local_broker import LocalKafka, create_topic
from ingest.kafka.produce import Uuid7
from ingest.kafka.source import read_stream
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


def produce(config: dict, prefix: str, topics: int, records: int) -> None:
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    names = [f"{prefix}.t{n:03d}" for n in range(topics)]
    for name in names:
        create_topic(config, name)
    rnd, uids = random.Random(7), Uuid7()
    for i in range(records):
        uid = uids()
        producer.produce(names[i % topics], payload(uid, int(time.time() * 1000), rnd),
                         headers=[(UID_HEADER, uid.encode())])
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def pipeline_for(bootstrap: str, prefix: str, root: Path, per_topic: bool, half: int) -> Pipeline:
    if per_topic:
        kafka = KafkaSource(bootstrap, pattern=rf"{prefix}\..*", max_offsets_per_trigger=half)
        target, dead = root / "tables" / "${topic}", root / "dead_letter" / "${topic}"
    else:
        kafka = KafkaSource(bootstrap, topics=(f"{prefix}.t000",), max_offsets_per_trigger=half)
        target, dead = root / "tables" / "one", root / "dead_letter" / "one"
    return Pipeline(name="bench_topics", source=Source(kafka, "json", SCHEMA), uid=Uid(header=UID_HEADER),
                    target=Target(path=str(target)), checkpoint=str(root / "checkpoint"),
                    dead_letter=DeadLetter(path=str(dead)))


def run_leg(spark, pipeline: Pipeline, leg: str) -> list[float]:
    """Seconds of each foreachBatch call."""
    quiet = lambda report: None  # noqa: E731
    if leg == "one_table":
        processor = BatchProcessor(pipeline, payload_schema(spark, pipeline), on_report=quiet)
    else:
        processor = TopicRouter(pipeline, on_report=quiet, threads=1 if leg == "sequential" else 8)
    seconds: list[float] = []

    def timed(batch_df, batch_id):
        started = time.perf_counter()
        processor(batch_df, batch_id)
        seconds.append(time.perf_counter() - started)

    query = (read_stream(spark, pipeline).writeStream.option("checkpointLocation", pipeline.checkpoint)
             .foreachBatch(timed).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/run many_topics", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, one repeat")
    parser.add_argument("--topics", default="1,10,50")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    counts = [int(n) for n in args.topics.split(",")]
    records = args.records or (10_000 if args.quick else 100_000)
    repeats = args.repeats or (1 if args.quick else 3)

    from ingest.platform.session import get_session

    work = Path(tempfile.mkdtemp(prefix="bench-topics-"))
    broker = LocalKafka(work_dir=work / "kafka", start_timeout_s=600)  # a loaded machine starts it slowly
    broker.start()
    spark = get_session("bench-topics", master="local[2]", conf={
        "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    runs: list[dict] = []
    try:
        for n in counts:
            produce(broker.client_config(), f"bench{n}", n, records)
        plan = [(n, leg) for n in counts for leg in (("one_table",) if n == 1 else ()) + ("sequential", "parallel")]
        # warm-up: JIT and class loading are no leg's cost
        run_leg(spark, pipeline_for(broker.bootstrap, f"bench{counts[0]}", work / "warm", True, records // 2),
                "parallel")
        for repeat in range(repeats):
            for n, leg in (plan if repeat % 2 == 0 else list(reversed(plan))):
                root = work / f"run-{n}-{leg}-{repeat}"
                pipeline = pipeline_for(broker.bootstrap, f"bench{n}", root, leg != "one_table", records // 2)
                seconds = run_leg(spark, pipeline, leg)
                runs.append({"topics": n, "leg": leg, "repeat": repeat, "batch_seconds": seconds})
                print(f"{n:>3} topics {leg:<10} batches {', '.join(f'{s:.2f}s' for s in seconds)}", flush=True)
                shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
    report(runs, records, counts)


def report(runs: list[dict], records: int, counts: list[int]) -> None:
    def median(n, leg, batch):
        values = [r["batch_seconds"][batch] for r in runs
                  if r["topics"] == n and r["leg"] == leg and len(r["batch_seconds"]) > batch]
        return statistics.median(values) if values else None

    base = median(1, "one_table", 1)
    rows = []
    for n in counts:
        seq0, par0 = median(n, "sequential", 0), median(n, "parallel", 0)
        seq1, par1 = median(n, "sequential", 1), median(n, "parallel", 1)
        rows.append({"topics": n, "records": records,
                     "sequential_first_s": seq0, "parallel_first_s": par0,
                     "sequential_s": seq1, "parallel_s": par1,
                     "sequential_vs_one_table": seq1 / base if base and seq1 else None,
                     "parallel_vs_one_table": par1 / base if base and par1 else None,
                     "parallel_vs_sequential": par1 / seq1 if seq1 and par1 else None})
    (RESULTS / "many_topics.json").write_text(json.dumps({"one_table_s": base, "rows": rows, "runs": runs},
                                                      indent=2))
    print(f"\none_table (1 topic, single-table path), batch 1: {base:.2f}s" if base else "")
    print("topics  seq first  par first  seq steady  par steady  seq/base  par/base  par/seq")
    for r in rows:
        cells = [r["sequential_first_s"], r["parallel_first_s"], r["sequential_s"], r["parallel_s"],
                 r["sequential_vs_one_table"], r["parallel_vs_one_table"], r["parallel_vs_sequential"]]
        print(f"{r['topics']:>6}" + "".join(f"{c:>11.2f}" if c is not None else f"{'-':>11}" for c in cells))


if __name__ == "__main__":
    main()
