"""Where a small batch's time goes inside the JVM: Java Flight Recorder (in the JDK).

One SparkSession (local[2], ingest's local defaults), no broker: ingest's batch
function (`BatchProcessor`) runs on 500-record Kafka-shaped batches (those of
`bench/studies/batch_settings.py`); after a warm-up, JFR samples the driver JVM while
`--batches` batches run. A sample is charged to every step whose frame is on
its stack (steps nest: the MERGE holds its commit, the commit its checkpoint),
and the table gives each step's share of the samples of the thread that runs
the batch (py4j's), the thread whose time is the batch's fixed cost. Usage:

    bench/run jvm_profile [--batches 15] [--batch-records 500] [--set KEY=VALUE ...]
                          [--out bench/results/jvm_profile.json]

It also prints the Spark jobs of one more batch, run after the recording: when
each started and ended, from the batch's first job; the gaps between them are
the driver's own work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import RESULTS
from bench.studies import batch_settings

# (what it is, a frame that is on the stack exactly while it runs); indentation shows nesting
STEPS = (
    ("MERGE (Delta's MergeIntoCommand)", "MergeIntoCommand.runMerge"),
    ("  idempotency check: the txn id's last version (an aggregation of the table state)",
     "DeltaCommand.hasBeenExecuted"),
    ("  data skipping: the files the bounds leave", "OptimisticTransactionImpl.filterFiles"),
    ("  writing the new files", "TransactionalWrite.writeFiles"),
    ("  commit", "OptimisticTransactionImpl.commitImpl"),
    ("    checkpoint (every 10th commit)", "Checkpoints.checkpoint"),
    ("the table state (log replay) for a new version", "Snapshot.stateReconstruction"),
    ("the summary's aggregation (counts, offsets, bounds)", "Dataset.collectToPython"),
    ("analysis of plans (ingest's DataFrames and Delta's)", "Analyzer.executeAndCheck"),
    ("rendering each execution's plan for the SQL UI", "QueryExecution.explainString"),
)


def timeline(spark, jobs_before: int) -> list[dict]:
    """The Spark jobs since `jobs_before`: when each ran (ms from the first's start) and what it was."""
    listed = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    jobs = sorted((listed.apply(i) for i in range(listed.size())), key=lambda job: job.jobId())[jobs_before:]
    if not jobs:
        return []
    origin = jobs[0].submissionTime().get().getTime()
    return [{"start_ms": job.submissionTime().get().getTime() - origin,
             "end_ms": job.completionTime().get().getTime() - origin if job.completionTime().isDefined() else None,
             "tasks": job.numTasks(),
             "what": (job.description().get() if job.description().isDefined() else "") or job.name()[:60]}
            for job in jobs]


def profile(batches: int, records: int, settings: dict[str, str], recording: Path) -> list[dict]:
    """Runs the batches under JFR; the job timeline of one more batch, run after the recording."""
    from ingest.platform.session import get_session

    java_options = "-XX:FlightRecorderOptions:stackdepth=1024"  # joined to ingest's own options
    spark = get_session("bench-jvm-profile", master="local[2]",
                        conf={"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": java_options,
                              "spark.driver.memory": "3g", "spark.ui.retainedJobs": "100000"})
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in settings.items():
        spark.conf.set(key, value)
    frames = batch_settings.batches(spark, batches + 6, records)
    processor = batch_settings.ingest_side(spark, Path(tempfile.mkdtemp(prefix="bench-jvm-profile-")))
    for batch_id, frame in enumerate(frames[:5]):  # table creation, JIT and class loading: not a steady batch
        processor(frame, batch_id)
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    subprocess.run(["jcmd", pid, "JFR.start", "name=batches", "settings=profile", f"filename={recording}"],
                   check=True, capture_output=True)
    for batch_id, frame in enumerate(frames[5:-1], start=5):
        processor(frame, batch_id)
    subprocess.run(["jcmd", pid, "JFR.stop", "name=batches"], check=True, capture_output=True)
    jobs_before = batch_settings.jobs(spark)
    began = time.perf_counter()
    processor(frames[-1], len(frames) - 1)
    jobs = [*timeline(spark, jobs_before), {"batch_ms": round((time.perf_counter() - began) * 1000)}]
    spark.stop()
    return jobs


def shares(recording: Path) -> dict:
    """Each step's share of the batch thread's samples. py4j gives every Python thread a JVM
    thread named Thread-N: the batch's is the one that runs the MERGEs; the others (ingest's
    background thread warming the next table state) are counted as `background`."""
    printed = subprocess.run(["jfr", "print", "--json", "--stack-depth", "1024", "--events",
                              "jdk.ExecutionSample", str(recording)], check=True, capture_output=True, text=True)
    events = json.loads(printed.stdout)["recording"]["events"]
    stacks: dict[str, list[set[str]]] = {}
    for event in events:
        values = event["values"]
        thread = values["sampledThread"]["javaName"] or ""
        stacks.setdefault(thread, []).append(
            {f"{f['method']['type']['name'].rsplit('/', 1)[-1]}.{f['method']['name']}"
             for f in values["stackTrace"]["frames"]})
    merging = Counter({thread: sum(STEPS[0][1] in stack for stack in found) for thread, found in stacks.items()})
    batch_thread = merging.most_common(1)[0][0] if merging else ""
    threads, steps = Counter(), Counter()
    for thread, found in stacks.items():
        group = ("tasks" if thread.startswith("Executor task") else "batch" if thread == batch_thread
                 else "background" if thread.startswith("Thread-") else "other")
        threads[group] += len(found)
        if group == "batch":
            for on_stack in found:
                for label, frame in STEPS:
                    steps[label] += frame in on_stack
    batch = threads["batch"] or 1
    return {"samples": dict(threads),
            "steps": [{"step": label, "samples": steps[label], "share_of_batch_thread": round(steps[label] / batch, 3)}
                      for label, _ in STEPS]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run jvm_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--batch-records", type=int, default=batch_settings.BATCH)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark SQL setting for the run (such as spark.sql.ui.explainMode=formatted)")
    parser.add_argument("--out", type=Path, default=RESULTS / "jvm_profile.json")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    recording = Path(tempfile.mkdtemp(prefix="bench-jfr-")) / "batches.jfr"
    jobs = profile(args.batches, args.batch_records, settings, recording)
    result = {"batches": args.batches, "batch_records": args.batch_records, "settings": settings,
              **shares(recording), "one_batch_jobs": jobs}
    for step in result["steps"]:
        print(f"{step['share_of_batch_thread']:6.1%}  {step['samples']:5}  {step['step']}")
    print(f"samples: {result['samples']}")
    for job in jobs[:-1]:
        end = "running" if job["end_ms"] is None else job["end_ms"]  # a background job outlasting the batch
        print(f"{job['start_ms']:6} - {end:>6} ms  {job['tasks']:3} tasks  {job['what']}")
    print(f"the batch: {jobs[-1]['batch_ms']} ms")
    runs = json.loads(args.out.read_text()) if args.out.exists() else {}
    name = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
    runs[name if args.batch_records == batch_settings.BATCH else f"{name}, {args.batch_records} records"] = result
    args.out.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
