"""The suite's run, for the whole suite (`bench/studies/suite.py`) and for one of its parts
run alone (`python -m bench.studies.<part>`): the broker and the pre-produced topics, the
one Spark application with its warm-up, each part in turn, then the results, the table and
the plots. The parts are given by the caller (`Part`), so the harness imports no study.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import BENCH, RESULTS
from bench.harness import datagen, report
from bench.harness.legs import LEG_FUNCTIONS, Topic, fresh_dir
from bench.harness.meter import SqlMetrics

PARTITIONS = 2
BENCH_SPARK_CONF = {
    "spark.driver.memory": "3g",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.ui.retainedExecutions": "2000",
    "spark.ui.retainedJobs": "100000",  # jobs per batch are counted from the status store
}


@dataclass(frozen=True)
class Scale:
    name: str
    records: int  # throughput topic, committed records
    max_offsets: int  # max_offsets_per_trigger for every Spark leg
    r2_rows: int
    r2_files: int
    r2_batch: int
    r2_steps: int  # the large table is appended in this many parts: the plot's table sizes
    r4_records: int
    l1_records: int  # L1's topic: >= 20 batches of fixed_cost.BATCH_RECORDS


QUICK = Scale("quick", records=100_000, max_offsets=50_000, r2_rows=2_000_000, r2_files=20,
              r2_batch=50_000, r2_steps=2, r4_records=1_000, l1_records=10_500)
FULL = Scale("full", records=2_000_000, max_offsets=200_000, r2_rows=10_000_000, r2_files=100,
             r2_batch=200_000, r2_steps=4, r4_records=1_000, l1_records=10_500)
SMOKE = Scale("smoke", records=20_000, max_offsets=10_000, r2_rows=200_000, r2_files=8,
              r2_batch=5_000, r2_steps=2, r4_records=200, l1_records=2_000)


@dataclass
class Bench:
    spark: object
    kafka: object
    work: Path
    sql: SqlMetrics
    max_offsets: int
    partitions: int = PARTITIONS


@dataclass
class Context:
    """What a part measures with: the shared topics, and the Spark application (None for a
    part that runs before it, in fresh processes)."""
    kafka: object
    work: Path
    scale: Scale
    reps: int
    topic: Topic  # the throughput topic
    small: Topic  # the warm-up's (and R4's) topic
    own_topic: Topic | None  # the part's own, when it asks for one
    bench: Bench | None


@dataclass(frozen=True)
class Part:
    """One part of the suite. `title` is logged as it starts (None: the part logs its own);
    `topic_records` asks for a topic of its own; a `guarded` part's failure is recorded, not
    fatal, so the parts before and after it still report."""
    name: str
    module: str  # where it runs alone: python -m MODULE
    measure: Callable[[Context], dict]
    title: Callable[[Scale], str] | None = None
    before_spark: bool = False
    guarded: bool = False
    topic_records: Callable[[Scale], int] | None = None
    plot: Callable[[dict, Path], None] | None = None


def log(text: str) -> None:
    print(text, flush=True)


def parse_args(parts: Sequence[Part], argv, alone: Part | None = None, description: str = "",
               epilog: str = ""):
    """The suite's options; for a part run `alone` the defaults run that part and keep its
    results beside the suite's, under the part's name."""
    names = ",".join(p.name for p in parts)
    parser = argparse.ArgumentParser(
        prog=f"python -m {alone.module}" if alone else "bench/run", description=description,
        epilog=f"A part alone: python -m MODULE, MODULE one of {', '.join(p.module for p in parts)}. {epilog}")
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 10 minutes on 2 cores)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run that checks the bench itself works; its figures mean nothing")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every leg (default 3)")
    own = alone.name if alone else None
    parser.add_argument("--only", default=own or names,
                        help=f"comma-separated parts to run (default {own or 'all: ' + names})")
    parser.add_argument("--keep-work", action="store_true", help="keep bench/work/ (tables, logs) afterwards")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: redo the table, plot and README figures from bench/results/NAME.json")
    parser.add_argument("--no-write", action="store_true",
                        help="print only: leave NAME.json, the plot and the results' README.md as they are")
    parser.add_argument("--results", default=own or "results",
                        help=f"name of the results: bench/results/NAME.json and the NAME section of its "
                             f"README.md (default {own or 'results'}; the section of results is the figures); "
                             "another name keeps a run beside it, such as the full run's R2 (--results full-r2)")
    return parser.parse_args(argv)


def machine() -> dict:
    from importlib.metadata import version

    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {
        "cpu": cpu, "cores": os.cpu_count(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "java": java[0] if java else "java ?", "pyspark": pyspark.__version__,
        "delta_spark": version("delta-spark"), "confluent_kafka": version("confluent-kafka"),
        "load_start": round(os.getloadavg()[0], 1),
    }


def produce(kafka, work: Path, name: str, records: int, late_retries: int = 0) -> tuple[Topic, datagen.Produced]:
    datagen.create_topic(kafka.client_config(), name, PARTITIONS)
    produced = datagen.produce_topic(kafka.client_config(), name, records, True, work,
                                     late_retries=late_retries, partitions=PARTITIONS)
    return Topic(name, PARTITIONS, produced.sent, produced.unique, produced.uids_file), produced


def warm_up(bench: Bench, topic: Topic) -> None:
    """JIT and class loading belong to no leg: one untimed pass of each Spark leg."""
    for leg in ("spark_noop", "plain_append", "spark_dedup", "ingest"):
        LEG_FUNCTIONS[leg](bench, topic, fresh_dir(bench.work / "warm-up" / leg))


def spark_session():
    from ingest.platform.session import get_session

    return get_session("ingest-bench", conf=BENCH_SPARK_CONF, master="local[2]")


def _guarded(measure: Callable[[], dict]) -> dict:
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 (reported in results.json and the README)
        log(f"  failed: {type(error).__name__}: {error}")
        return {"error": f"{type(error).__name__}: {str(error)[:500]}"}


def _keep_partial(work: Path, results: dict) -> None:
    """What is measured so far, for `--report-only` after an interrupted run."""
    (work / "partial.json").write_text(json.dumps(results, indent=1, default=str) + "\n")


def _measure(part: Part, context: Context, results: dict) -> None:
    if part.title is not None:
        log(part.title(context.scale))
    results[part.name] = _guarded(lambda: part.measure(context)) if part.guarded else part.measure(context)
    _keep_partial(context.work, results)


def run(args, parts: Sequence[Part]) -> dict:
    from ingest.kafka.local_broker import LocalKafka

    scale = SMOKE if args.smoke else QUICK if args.quick else FULL
    chosen = [p for p in parts if p.name in set(args.only.split(","))]
    work = fresh_dir(BENCH / "work")
    started = time.perf_counter()
    results = {"scale": asdict(scale), "reps": args.reps, "machine": machine(),
               "started_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    # a shared machine under load can take minutes to start a JVM
    with LocalKafka(work_dir=fresh_dir(work / "kafka"), start_timeout_s=300) as kafka:
        log(f"producing {scale.records:,} records ({scale.name} run)")
        topic, produced = produce(kafka, work, "bench-events", scale.records, datagen.LATE_RETRIES)
        small, _ = produce(kafka, work, "bench-small", scale.r4_records)
        own = {p.name: produce(kafka, work, f"bench-{p.name}", p.topic_records(scale))[0]
               for p in chosen if p.topic_records is not None}
        results["data"] = {"topic": topic.name, "records": topic.records, "unique": topic.unique,
                           "aborted": produced.aborted, "value_bytes": produced.value_bytes,
                           "partitions": PARTITIONS, "produce_seconds": round(produced.seconds, 1),
                           "late_retries": produced.late_retries}
        context = Context(kafka, work, scale, args.reps, topic, small, None, None)
        for part in (p for p in chosen if p.before_spark):
            _measure(part, context, results)
        spark = spark_session()
        context.bench = Bench(spark, kafka, work, SqlMetrics(spark), scale.max_offsets)
        log("warm-up")
        warm_up(context.bench, small)
        for part in (p for p in chosen if not p.before_spark):
            context.own_topic = own.get(part.name)
            _measure(part, context, results)
        spark.stop()
    results["machine"]["load_end"] = round(os.getloadavg()[0], 1)
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    return results


def main(parts: Sequence[Part], argv=None, alone: Part | None = None, description: str = "",
         epilog: str = "") -> int:
    """Run the parts (or report an earlier run's results), write the results and the plots."""
    args = parse_args(parts, argv, alone, description, epilog)
    results_file = RESULTS / f"{args.results}.json"
    section = "figures" if args.results == "results" else args.results
    results = json.loads(results_file.read_text()) if args.report_only else run(args, parts)
    summary = report.summarize(results)
    results["summary"] = summary
    text = report.text_report(results, summary)
    print("\n" + text)
    if not args.no_write:
        if not args.report_only:
            results_file.write_text(json.dumps(results, indent=1, default=str) + "\n")
        if results.get("r2") and section == "figures":
            report.plot(results, RESULTS / "merge_time.png")
        for part in parts:
            if part.plot is not None and (results.get(part.name) or {}).get("runs"):
                part.plot(results, RESULTS / f"{part.name}.png")
        report.update_readme(RESULTS / "README.md", text, section)
    if not (args.keep_work or args.report_only):
        shutil.rmtree(BENCH / "work", ignore_errors=True)
    return 0
