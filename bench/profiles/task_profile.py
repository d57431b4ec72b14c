"""Where a record's CPU goes, executor threads included: Java Flight Recorder over 50,000-record
batches of ingest's batch function (insert_only and upsert) and of a plain Delta append of the
same batches under a txn id, side by side (issue #53).

One SparkSession (local[2], ingest's local defaults, driver 3 GB), no broker: the batches of
`record_path` (Kafka-shaped frames cached in memory, 2% re-sends, a tenth of each batch updating
the batch before). The legs alternate batch by batch, each into its own table; the first
`--warm` batches (the tables made, JIT and class loading) are left out. Each batch of each leg is a recording of its own
(`jcmd JFR.start` / `JFR.stop`), metered beside it (CPU of the driver JVM and this process, as
the OS counts it). Ingest's recording holds its next table state too (`settle`, a thread beside
the next batch in a run); the append, written with `txnAppId`/`txnVersion` as Delta's streaming
sink writes, computes that state inside its write.

The CPU is counted per thread as the OS counts it (`/proc/PID/task`), by what the JVM names
its threads: the tasks, the JIT compilers, the garbage collector, every other thread (the
driver's: py4j, the scheduler, Delta's commit), and this Python process. Within the tasks and
the driver's threads, JFR's samples tell what the CPU was spent on, and the group's CPU is
shared out as its samples are (JFR samples a thread only while it runs Java code or, for the
tasks, native code; a share, not a count). A sample is charged to one category: the first
frame, from the leaf up, that a category of CATEGORIES names; a sample none names is `other`.
The executor threads (`Executor task ...`) are the tasks; every other thread is the driver's.
Java code is sampled every 10 ms a thread (`jdk.ExecutionSample`, the `profile` settings), the
tasks in native code every 20 ms (`jdk.NativeMethodSample`: compression, file I/O; the driver's
threads in native code wait on sockets and pipes, and are left out). Beside each batch, the
classes Spark compiled for it (`CodegenMetrics`). Usage:

    bench/run task_profile [--records 50000] [--reps 3] [--warm 2] [--no-jfr] [--java-options OPTS]
                           [--out bench/results/task_profile.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import psutil

from bench import RESULTS
from bench.harness.meter import Meter
from bench.studies import batch_settings, record_path

LEGS = ("append", "insert_only", "upsert")
PERIOD_MS = {"jdk.ExecutionSample": 10, "jdk.NativeMethodSample": 20}  # JDK 17's `profile` settings
TASK_THREAD = "Executor task"  # "launch worker for task ..." or, named when first seen, "idle worker#N"

# (category, frames that name it): a frame names a category when it contains one of the texts
CATEGORIES = (
    ("compression (Snappy, zstd)", ("org.xerial.snappy", "com.github.luben.zstd", "io.airlift.compress",
                                    "org.apache.hadoop.io.compress")),
    ("file I/O and checksums", ("java.io.FileOutputStream", "java.io.FileInputStream", "java.io.RandomAccessFile",
                                "sun.nio.ch.FileDispatcherImpl", "sun.nio.fs.UnixNativeDispatcher",
                                "org.apache.hadoop.util.DataChecksum", "org.apache.hadoop.util.NativeCrc32",
                                "java.util.zip.CRC32")),
    ("JSON decode (from_json)", ("com.fasterxml.jackson", "org.apache.spark.sql.catalyst.json")),
    ("Delta's file statistics", ("DeltaTaskStatisticsTracker", "DeltaJobStatisticsTracker",
                                 "org.apache.spark.sql.delta.stats")),
    ("Parquet encoding and reading", ("org.apache.parquet", "execution.datasources.parquet",
                                      "VectorizedParquetRecordReader")),
    ("cache (in-memory columns)", ("sql.execution.columnar", "InMemoryRelation", "CachedBatch")),
    ("sort", ("UnsafeExternalSorter", "UnsafeInMemorySorter", "RadixSort", "UnsafeExternalRowSorter",
              "UnsafeSorterSpill", "TimSort", "SortExec")),
    ("shuffle (write, read, serialization)", ("org.apache.spark.shuffle", "ShuffleBlockFetcherIterator",
                                              "DiskBlockObjectWriter", "ShuffleExternalSorter",
                                              "org.apache.spark.serializer", "UnsafeRowSerializer")),
    ("aggregation", ("HashAggregateExec", "SortAggregateExec", "AggregationIterator",
                     "UnsafeFixedWidthAggregationMap", "UnsafeKVExternalSorter")),
    ("window (row_number)", ("WindowExec", "WindowFunctionFrame", "WindowEvaluatorFactory")),
    ("join", ("SortMergeJoin", "BroadcastHashJoin", "HashedRelation", "HashJoin")),
    ("Delta's log, state and deletion vectors", ("org.apache.spark.sql.delta",)),
    ("generated and interpreted row code (projections, filters, hashes)",
     ("GeneratedClass", "sql.catalyst.expressions", "UTF8String", "UnsafeRow", "sql.catalyst.util")),
    ("Python and py4j", ("py4j", "org.apache.spark.api.python")),
    ("Spark's planning and analysis", ("sql.catalyst", "sql.execution")),
)


def category(frames: list[str]) -> str:
    for frame in frames:  # leaf first
        for name, texts in CATEGORIES:
            if any(text in frame for text in texts):
                return name
    return "other"


def charged(recording: Path) -> dict:
    """ms per (thread kind, category), and the tasks' leaf methods, from one recording."""
    printed = subprocess.run(["jfr", "print", "--json", "--stack-depth", "256", "--events",
                              ",".join(PERIOD_MS), str(recording)], check=True, capture_output=True, text=True)
    by_category: Counter = Counter()
    leaves: Counter = Counter()
    for event in json.loads(printed.stdout)["recording"]["events"]:
        values = event["values"]
        thread = (values.get("sampledThread") or {}).get("javaName") or ""
        trace = values.get("stackTrace") or {"frames": []}
        frames = [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}" for f in trace["frames"]]
        if not frames:
            continue
        kind = "tasks" if thread.startswith(TASK_THREAD) else "driver"
        if kind == "driver" and event["type"] == "jdk.NativeMethodSample":
            continue  # the driver's threads in native code wait: for sockets, pipes, child processes
        ms = PERIOD_MS[event["type"]]
        by_category[(kind, category(frames))] += ms
        if kind == "tasks":
            leaves[frames[0]] += ms
    return {"ms": {f"{kind}|{name}": ms for (kind, name), ms in by_category.items()},
            "leaves": dict(leaves.most_common(40))}


THREAD_GROUPS = (  # (group, how the JVM names its threads: /proc keeps 15 characters)
    ("tasks", ("Executor task",)),
    ("JIT compiler", ("C1 CompilerThre", "C2 CompilerThre")),
    ("garbage collector", ("GC Thread", "G1 ", "VM Thread")),
)
DRIVER = "driver threads (py4j, scheduler, commit)"
PYTHON = "Python (this process)"


def thread_group(name: str) -> str:
    return next((group for group, prefixes in THREAD_GROUPS if name.startswith(prefixes)), DRIVER)


def thread_ticks(pid: str) -> dict[str, tuple[str, int]]:
    """Each thread of the JVM: its name and its CPU so far (user + system clock ticks)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        found[task.name] = (name, int(fields[11]) + int(fields[12]))
    return found


def cpu_by_group(before: dict, after: dict) -> dict[str, float]:
    """ms of CPU per thread group between two `thread_ticks` (a thread that ended in between is lost)."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    groups: Counter = Counter()
    for tid, (name, ticks) in after.items():
        groups[thread_group(name)] += (ticks - before.get(tid, (name, 0))[1]) * tick_ms
    return dict(groups)


def record(spark, pid: str, recording: Path | None, step) -> dict:
    if recording is not None:
        subprocess.run(["jcmd", pid, "JFR.start", "name=batch", "settings=profile", f"filename={recording}"],
                       check=True, capture_output=True)
    codegen = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    try:
        compiled = codegen.getCount()
        python = psutil.Process().cpu_times()
        threads = thread_ticks(pid)
        with Meter(spark) as meter:
            step()
        groups = cpu_by_group(threads, thread_ticks(pid))
        after = psutil.Process().cpu_times()
        groups[PYTHON] = (after.user + after.system - python.user - python.system) * 1000
        compiled = codegen.getCount() - compiled
    finally:
        if recording is not None:
            subprocess.run(["jcmd", pid, "JFR.stop", "name=batch"], check=True, capture_output=True)
    assert meter.usage is not None
    return {"wall_ms": meter.usage.seconds * 1000, "cpu_ms": meter.usage.cpu_seconds * 1000, "groups": groups,
            "classes_compiled": compiled}


def table(runs: list[dict], records: int) -> list[str]:
    """µs of CPU a record (medians over batches) per thread group, as the OS counts it, and within
    the tasks and the driver's threads per category: the group's CPU shared out as its samples
    are; each leg, and insert_only's and upsert's excess over the append."""
    def median(leg: str, value) -> float:
        return statistics.median(value(r) for r in runs if r["leg"] == leg) * 1000 / records

    def share(run: dict, group: str, key: str) -> float:
        sampled = sum(ms for k, ms in run["ms"].items() if k.startswith(group + "|"))
        return run["groups"].get(DRIVER if group == "driver" else group, 0) * run["ms"].get(key, 0) / (sampled or 1)

    def row(label: str, value) -> str | None:
        figures = [median(leg, value) for leg in LEGS]
        if max(figures) < 0.5:
            return None
        return (f"| {label} | " + " | ".join(f"{f:.1f}" for f in figures)
                + f" | {figures[1] - figures[0]:+.1f} | {figures[2] - figures[0]:+.1f} |")

    compiled = {leg: statistics.median(r["classes_compiled"] for r in runs if r["leg"] == leg) for leg in LEGS}
    lines = ["| µs of CPU a record | " + " | ".join(LEGS) + " | insert_only - append | upsert - append |",
             "| --- |" + " ---: |" * (len(LEGS) + 2)]
    lines.append(row("**all (the OS's count: JVM and Python)**", lambda r: r["cpu_ms"]))
    groups = [group for group, _ in THREAD_GROUPS] + [DRIVER, PYTHON]
    for group in groups:
        lines.append(row(f"**{group}**", lambda r, group=group: r["groups"].get(group, 0)))
        if group not in ("tasks", DRIVER):
            continue
        kind = "tasks" if group == "tasks" else "driver"
        keys = sorted({k for r in runs for k in r["ms"] if k.startswith(kind + "|")},
                      key=lambda k, kind=kind: -median("upsert", partial(share, group=kind, key=k)))
        for key in keys:
            lines.append(row(f"&nbsp;&nbsp;{key.split('|', 1)[1]}", partial(share, group=kind, key=key)))
    lines.append("| classes Spark compiled a batch (not µs) | " + " | ".join(f"{compiled[leg]:.0f}" for leg in LEGS)
                 + " | | |")
    return [line for line in lines if line is not None]


def settled(processor):
    """ingest's batch, then its next table state (a thread beside the next batch in a run)."""
    def run(frame, batch_id: int) -> None:
        processor(frame, batch_id)
        processor.settle()
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run task_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3, help="recorded batches per leg (default 3)")
    parser.add_argument("--warm", type=int, default=2,
                        help="batches before the recorded ones: the tables made, JIT and class loading (default 2)")
    parser.add_argument("--no-jfr", action="store_true", help="the CPU per thread group only, no recording")
    parser.add_argument("--java-options", default="", help="more options for the driver JVM")
    parser.add_argument("--out", type=Path, default=RESULTS / "task_profile.json")
    args = parser.parse_args(argv)
    from ingest.platform.session import get_session

    spark = get_session("bench-task-profile", master="local[2]",
                        conf={"spark.ui.enabled": "false", "spark.driver.memory": "3g",
                              "spark.driver.extraJavaOptions":
                                  f"-XX:FlightRecorderOptions:stackdepth=256 {args.java_options}".strip()})
    spark.sparkContext.setLogLevel("ERROR")
    pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    load_before = os.getloadavg()[0]
    frames = record_path.batches(spark, args.records, args.warm + args.reps)
    runs = []
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        sides = {"append": batch_settings.append_side(spark, root / "append", txn_app_id="bench-append")}
        for mode in ("insert_only", "upsert"):
            sides[mode] = settled(record_path.processor(spark, root / mode, mode))
        for batch_id, frame in enumerate(frames):
            for leg in (LEGS if batch_id % 2 else tuple(reversed(LEGS))):
                if batch_id < args.warm:  # makes the tables, JIT and class loading: not a steady batch
                    sides[leg](frame, batch_id)
                    continue
                recording = None if args.no_jfr else root / f"{leg}-{batch_id}.jfr"
                metered = record(spark, pid, recording, partial(sides[leg], frame, batch_id))
                runs.append({"leg": leg, "batch": batch_id, **metered,
                             **(charged(recording) if recording else {"ms": {}, "leaves": {}})})
                print(f"batch {batch_id} {leg}: {metered['wall_ms']:,.0f} ms wall, {metered['cpu_ms']:,.0f} ms CPU, "
                      f"{metered['classes_compiled']} classes compiled, "
                      f"{sum(runs[-1]['ms'].values()):,} ms sampled; " + ", ".join(
                          f"{group} {ms:,.0f}" for group, ms in sorted(metered["groups"].items())), flush=True)
    spark.stop()
    lines = table(runs, args.records)
    print("\n".join(lines))
    args.out.write_text(json.dumps({"records": args.records, "reps": args.reps,
                                    "load_average": [load_before, os.getloadavg()[0]],
                                    "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "warm": args.warm,
                                    "runs": runs, "table": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
