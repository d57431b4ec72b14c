"""Where a small batch's time goes inside the JVM: Java Flight Recorder (in the JDK).

One SparkSession (local[2], ingest's local defaults), no broker: ingest's batch
function (`BatchProcessor`) runs on 500-record Kafka-shaped batches (those of
`bench/batch_settings.py`); after a warm-up, JFR samples the driver JVM while
`--batches` batches run. A sample is charged to every step whose frame is on
its stack (steps nest: the MERGE holds its commit, the commit its checkpoint),
and the table gives each step's share of the samples of the thread that runs
the batch (py4j's), the thread whose time is the batch's fixed cost. Usage:

    .venv/bin/python bench/jvm_profile.py [--batches 15] [--set KEY=VALUE ...] [--out bench/jvm_profile.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import batch_settings  # noqa: E402

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


def profile(batches: int, settings: dict[str, str], recording: Path) -> None:
    from ingest.platform.session import LOCAL_DEFAULTS, get_session

    java_options = f"{LOCAL_DEFAULTS['spark.driver.extraJavaOptions']} -XX:FlightRecorderOptions:stackdepth=1024"
    spark = get_session("bench-jvm-profile", master="local[2]",
                        conf={"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": java_options})
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in settings.items():
        spark.conf.set(key, value)
    frames = batch_settings.batches(spark, batches + 5)
    processor = batch_settings.ingest_side(spark, Path(tempfile.mkdtemp(prefix="bench-jvm-profile-")))
    for batch_id, frame in enumerate(frames[:5]):  # table creation, JIT and class loading: not a steady batch
        processor(frame, batch_id)
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    subprocess.run(["jcmd", pid, "JFR.start", "name=batches", "settings=profile", f"filename={recording}"],
                   check=True, capture_output=True)
    for batch_id, frame in enumerate(frames[5:], start=5):
        processor(frame, batch_id)
    subprocess.run(["jcmd", pid, "JFR.stop", "name=batches"], check=True, capture_output=True)
    spark.stop()


def shares(recording: Path) -> dict:
    printed = subprocess.run(["jfr", "print", "--json", "--stack-depth", "1024", "--events",
                              "jdk.ExecutionSample", str(recording)], check=True, capture_output=True, text=True)
    events = json.loads(printed.stdout)["recording"]["events"]
    threads, steps = Counter(), Counter()
    for event in events:
        values = event["values"]
        thread = values["sampledThread"]["javaName"] or ""
        group = "tasks" if thread.startswith("Executor task") else "batch" if thread.startswith("Thread-") else "other"
        threads[group] += 1
        if group != "batch":
            continue
        on_stack = {f"{f['method']['type']['name'].rsplit('/', 1)[-1]}.{f['method']['name']}"
                    for f in values["stackTrace"]["frames"]}
        for label, frame in STEPS:
            steps[label] += frame in on_stack
    batch = threads["batch"] or 1
    return {"samples": dict(threads),
            "steps": [{"step": label, "samples": steps[label], "share_of_batch_thread": round(steps[label] / batch, 3)}
                      for label, _ in STEPS]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark SQL setting for the run (such as spark.sql.ui.explainMode=formatted)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "jvm_profile.json")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    recording = Path(tempfile.mkdtemp(prefix="bench-jfr-")) / "batches.jfr"
    profile(args.batches, settings, recording)
    result = {"batches": args.batches, "batch_records": batch_settings.BATCH, "settings": settings,
              **shares(recording)}
    for step in result["steps"]:
        print(f"{step['share_of_batch_thread']:6.1%}  {step['samples']:5}  {step['step']}")
    print(f"samples: {result['samples']}")
    runs = json.loads(args.out.read_text()) if args.out.exists() else {}
    runs[", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"] = result
    args.out.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
