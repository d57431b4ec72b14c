"""`bench/run [--quick]`: side-by-side runs on the same data, reported as ratios.

Order of a run: start the embedded broker and pre-produce the topics once;
R4 (fresh processes, before this process starts its own Spark); then one Spark
application (local[2]) for a warm-up, the throughput legs, a profiled ingest
run, and R2. Writes bench/results/results.json, prints the table, draws
bench/results/merge_time.png and puts the figures into bench/results/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import BENCH, RESULTS
from bench.harness import datagen, report
from bench.harness.legs import LEG_FUNCTIONS, THROUGHPUT_LEGS, Topic, audit, fresh_dir
from bench.harness.meter import Meter, SqlMetrics, merge_files
from bench.profiles import driver_profile
from bench.studies import first_commit, fixed_cost, history, latency, merge_scale

PARTITIONS = 2
BENCH_SPARK_CONF = {
    "spark.driver.memory": "3g",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.ui.retainedExecutions": "2000",
    "spark.ui.retainedJobs": "100000",  # jobs per batch are counted from the status store
}
PARTS = ("r4", "legs", "l1", "latency", "g1", "profile", "r2")
PART_MODULES = {"r4": "bench.studies.first_commit", "l1": "bench.studies.fixed_cost",
                "latency": "bench.studies.latency", "g1": "bench.studies.history",
                "profile": "bench.profiles.driver_profile", "r2": "bench.studies.merge_scale"}


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


def log(text: str) -> None:
    print(text, flush=True)


STANDALONE = ("batch_settings", "cdc_merge", "connect", "formats", "many_topics", "small_files", "jvm_profile")


def parse_args(argv, part: str | None = None):
    """The suite's options; for `part` (one of PARTS run by its own module) the defaults
    run that part alone and keep its results beside the suite's, under the part's name."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {PART_MODULES[part]}" if part else "bench/run",
        description=__doc__.split("\n\n")[0],
        epilog=f"A part alone: python -m MODULE, MODULE one of {', '.join(PART_MODULES.values())}. "
               f"The other studies: bench/run STUDY [--help], STUDY one of {', '.join(STANDALONE)}.")
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 10 minutes on 2 cores)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run that checks the bench itself works; its figures mean nothing")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every leg (default 3)")
    parser.add_argument("--only", default=part or ",".join(PARTS),
                        help=f"comma-separated parts to run (default {part or 'all: ' + ','.join(PARTS)})")
    parser.add_argument("--keep-work", action="store_true", help="keep bench/work/ (tables, logs) afterwards")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: redo the table, plot and README figures from bench/results/NAME.json")
    parser.add_argument("--no-write", action="store_true",
                        help="print only: leave NAME.json, the plot and the results' README.md as they are")
    parser.add_argument("--results", default=part or "results",
                        help=f"name of the results: bench/results/NAME.json and the NAME section of its "
                             f"README.md (default {part or 'results'}; the section of results is the figures); "
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


def run_leg(bench: Bench, leg: str, topic: Topic, rep: int) -> dict:
    root = fresh_dir(bench.work / "legs" / f"{leg}-{rep}")
    bench.sql.mark()
    with Meter(None if leg == "raw_consume" else bench.spark) as meter:
        outcome = LEG_FUNCTIONS[leg](bench, topic, root)
    usage = meter.usage
    if outcome.records != topic.records:
        raise RuntimeError(f"{leg} read {outcome.records} records, the topic has {topic.records}")
    run = {"leg": leg, "rep": rep, "records": outcome.records, "seconds": round(usage.seconds, 3),
           "records_per_second": round(outcome.records / usage.seconds, 1),
           "cpu_seconds": round(usage.cpu_seconds, 2),
           "cpu_seconds_per_million": round(usage.cpu_seconds / outcome.records * 1e6, 2),
           "rss_peak_mb": round(usage.rss_peak_mb), "heap_peak_mb": usage.heap_peak_mb and round(usage.heap_peak_mb),
           **outcome.extra}
    if leg.startswith("ingest"):
        run["files_scanned_per_batch"] = [m["files_scanned"] for m in merge_files(bench.sql.since_mark())]
    if outcome.target:
        run["audit"] = audit(bench.spark, outcome.target, topic.uids_file)
    shutil.rmtree(root, ignore_errors=True)
    return run


def run_legs(bench: Bench, topic: Topic, reps: int) -> dict:
    runs = []
    for rep in range(reps):
        for leg in THROUGHPUT_LEGS if rep % 2 == 0 else THROUGHPUT_LEGS[::-1]:
            run = run_leg(bench, leg, topic, rep)
            audit_note = (f", duplicates {run['audit']['duplicate_uids']}, missing {run['audit']['missing_uids']}"
                          if "audit" in run else "")
            log(f"  {leg:13} rep {rep}: {run['seconds']:6.1f}s, {run['records_per_second']:9,.0f} records/s, "
                f"CPU {run['cpu_seconds']:.0f}s{audit_note}")
            runs.append(run)
    return {"runs": runs}


def spark_session():
    from ingest.platform.session import get_session

    return get_session("ingest-bench", conf=BENCH_SPARK_CONF, master="local[2]")


def _part(measure):
    """A newer part's failure is recorded, not fatal: the parts before and after still report."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 (reported in results.json and the README)
        log(f"  failed: {type(error).__name__}: {error}")
        return {"error": f"{type(error).__name__}: {str(error)[:500]}"}


def _keep_partial(work: Path, results: dict) -> None:
    """What is measured so far, for `--report-only` after an interrupted run."""
    (work / "partial.json").write_text(json.dumps(results, indent=1, default=str) + "\n")


def run(args) -> dict:
    from ingest.kafka.local_broker import LocalKafka

    scale = SMOKE if args.smoke else QUICK if args.quick else FULL
    parts = set(args.only.split(","))
    work = fresh_dir(BENCH / "work")
    started = time.perf_counter()
    results = {"scale": asdict(scale), "reps": args.reps, "machine": machine(),
               "started_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    # a shared machine under load can take minutes to start a JVM
    with LocalKafka(work_dir=fresh_dir(work / "kafka"), start_timeout_s=300) as kafka:
        log(f"producing {scale.records:,} records ({scale.name} run)")
        topic, produced = produce(kafka, work, "bench-events", scale.records, datagen.LATE_RETRIES)
        small, _ = produce(kafka, work, "bench-small", scale.r4_records)
        l1_topic = produce(kafka, work, "bench-l1", scale.l1_records)[0] if "l1" in parts else None
        results["data"] = {"topic": topic.name, "records": topic.records, "unique": topic.unique,
                           "aborted": produced.aborted, "value_bytes": produced.value_bytes,
                           "partitions": PARTITIONS, "produce_seconds": round(produced.seconds, 1),
                           "late_retries": produced.late_retries}
        if "r4" in parts:
            log("R4: time to first commit, fresh processes")
            results["r4"] = first_commit.run_all(kafka, small.name, scale.r4_records, work, args.reps, log)
            _keep_partial(work, results)
        spark = spark_session()
        bench = Bench(spark, kafka, work, SqlMetrics(spark), scale.max_offsets)
        log("warm-up")
        warm_up(bench, small)
        if "legs" in parts:
            log("throughput legs")
            results["legs"] = run_legs(bench, topic, args.reps)
            _keep_partial(work, results)
        if "l1" in parts:
            log(f"L1: fixed cost per batch, {fixed_cost.BATCH_RECORDS}-record batches")
            results["l1"] = _part(lambda: fixed_cost.run_all(bench, l1_topic, args.reps, log))
            _keep_partial(work, results)
        if "latency" in parts:
            log(f"latency: {latency.RATE} records/s, trigger {latency.TRIGGER}")
            results["latency"] = _part(lambda: latency.run_all(bench, args.reps, log))
            _keep_partial(work, results)
        if "g1" in parts:
            log("G1: one batch after 1,000 commits / after 10")
            results["g1"] = _part(lambda: history.run_all(bench, args.reps, log))
            _keep_partial(work, results)
        if "profile" in parts:
            log("profiling one ingest run")
            results["profile"] = driver_profile.profile_ingest(bench, topic)
            _keep_partial(work, results)
        if "r2" in parts:
            results["r2"] = merge_scale.run_all(bench, scale, args.reps, log)
        spark.stop()
    results["machine"]["load_end"] = round(os.getloadavg()[0], 1)
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    return results


def main(argv=None, part: str | None = None) -> int:
    args = parse_args(argv, part)
    results_file = RESULTS / f"{args.results}.json"
    section = "figures" if args.results == "results" else args.results
    if args.report_only:
        results = json.loads(results_file.read_text())
    else:
        results = run(args)
    summary = report.summarize(results)
    results["summary"] = summary
    text = report.text_report(results, summary)
    print("\n" + text)
    if not args.no_write:
        if not args.report_only:
            results_file.write_text(json.dumps(results, indent=1, default=str) + "\n")
        if results.get("r2") and section == "figures":
            report.plot(results, RESULTS / "merge_time.png")
        if (results.get("latency") or {}).get("runs"):
            latency.plot(results, RESULTS / "latency.png")
        report.update_readme(RESULTS / "README.md", text, section)
    if not (args.keep_work or args.report_only):
        shutil.rmtree(BENCH / "work", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
