"""Spark Connect beside the classic session: the same data, the same pipeline, side by side.

    bench/run connect [--quick] [--reps N]

classic   `ingest run --once` (the supervisor it drives, insert_only, JSON) on the classic
          session of this process
connect   the same run in a client process of its own, on a Connect session to a server
          started apart on this machine (`tests/connect/server.py`: spark-submit with the
          Delta and Kafka jars): a Connect server refuses to start where a classic session
          exists, and a Connect client in this process would switch pyspark's functions to
          Connect for the classic leg too (SPARK_CONNECT_MODE_ENABLED is process-wide)

Both sessions are `local[2]` with the same settings. The data is the suite's
(`harness/datagen`), produced once. Two measures, the legs in alternating order,
each repeated: throughput (records per second of the whole run, a catch-up of
several batches) and L1 (the median batch time at 500 records per batch, Spark's
`triggerExecution`, the first batch, which creates the table, left out). Every
leg's target must hold each committed uid once: the study stops otherwise.
Results go to bench/results/connect.json and the `connect` section of
bench/results/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import BENCH, REPO, RESULTS
from bench.harness import report
from bench.harness.legs import Topic, audit, bench_pipeline, fresh_dir
from bench.harness.runner import FULL, QUICK, SMOKE, machine, produce
from bench.studies.fixed_cost import BATCH_RECORDS
from tests.connect.server import IN_PROCESS_SERVER_VARIABLES, SERVER_TEST_CONF, ConnectServer

LEGS = ("classic", "connect")
DRIVER_MEMORY = "3g"  # the suite's driver, on both sides
SESSION_CONF = {**SERVER_TEST_CONF, "spark.driver.memory": DRIVER_MEMORY}


class BenchServer(ConnectServer):
    """The Connect tests' server with the suite's driver memory: both legs' drivers alike."""

    def command(self) -> list[str]:
        return [*super().command(), "--conf", f"spark.driver.memory={DRIVER_MEMORY}"]


def log(text: str) -> None:
    print(text, flush=True)


# --- one run, on either session --------------------------------------------------------


def supervised_run(spark, pipeline) -> dict:
    """`ingest run --once` on `spark`, timed from the query's start to its end: the
    supervisor claims, starts, polls and reports as the command does. Per batch, Spark's
    progress; on Connect each report is read from the target's Delta log, and the
    client's time in those reads is kept."""
    from ingest.platform.connect import is_connect
    from ingest.stream.supervisor import Supervisor

    progress: dict[int, Any] = {}  # batch id -> pyspark's StreamingQueryProgress
    reports: list = []
    connect = is_connect(spark)

    def keep_progress(report, _catch_up) -> None:
        reports.append(report)
        if connect:  # the query is gone once the run ends: its progress is read while it is there
            progress.update({p.batchId: p for p in supervisor.running[0].query.recentProgress})

    supervisor = Supervisor([pipeline], once=True, on_report=keep_progress, on_note=lambda _: None)
    supervisor.claim()
    try:
        started = time.perf_counter()
        supervisor.start(spark)
        ledger_seconds = _time_ledger_reads(supervisor)
        outcome = supervisor.wait()[0]
        seconds = time.perf_counter() - started
    finally:
        supervisor.release()
    if outcome.error:
        raise RuntimeError(outcome.error)
    if not connect:
        progress.update({p.batchId: p for p in supervisor.running[0].query.recentProgress})
    # attributes, not keys: on Connect the progress's `numInputRows` key is None, its sources' sum is not
    batches = [p for _, p in sorted(progress.items()) if p.numInputRows]
    return {"seconds": round(seconds, 3), "records": sum(p.numInputRows for p in batches),
            "batches": len(batches), "reports": len(reports),
            "batch_ms": [(p.durationMs or {}).get("triggerExecution", 0) for p in batches],
            "ledger_read_seconds": round(ledger_seconds[0], 3) if connect else None}


def _time_ledger_reads(supervisor) -> list[float]:
    """On Connect, the supervisor's reads of the Delta log for reports, timed in place."""
    spent = [0.0]
    reader = supervisor.running[0].ledger_reports
    if reader is not None:
        read = reader.new

        def timed():
            started = time.perf_counter()
            try:
                return read()
            finally:
                spent[0] += time.perf_counter() - started
        reader.new = timed
    return spent


def client_main(argv) -> int:
    """The Connect leg's client process: one run, its figures as JSON on the last line."""
    from ingest.platform.connect import connect_session

    parser = argparse.ArgumentParser(prog="python -m bench.studies.connect --client")
    parser.add_argument("--client", required=True, help="the Connect server's sc:// URL")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--max-offsets", required=True, type=int)
    args = parser.parse_args(argv)
    spark = connect_session(args.client, "ingest-bench-connect")
    pipeline = bench_pipeline(args.bootstrap, args.topic, args.root, args.max_offsets)
    figures = supervised_run(spark, pipeline)
    print(json.dumps({**figures, "target": pipeline.target.path}), flush=True)
    spark.stop()
    return 0


def connect_run(server: ConnectServer, bootstrap: str, topic: Topic, root: Path, max_offsets: int) -> dict:
    """One run in a client process of its own; its start and session are not timed."""
    env = {key: value for key, value in os.environ.items() if key not in IN_PROCESS_SERVER_VARIABLES}
    command = [sys.executable, "-m", "bench.studies.connect", "--client", server.url, "--bootstrap", bootstrap,
               "--topic", topic.name, "--root", str(root), "--max-offsets", str(max_offsets)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the Connect client failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the legs ----------------------------------------------------------------------------


class Legs:
    def __init__(self, spark, kafka, server: ConnectServer, work: Path):
        self.spark, self.kafka, self.server, self.work = spark, kafka, server, work

    def run(self, leg: str, topic: Topic, root: Path, max_offsets: int) -> dict:
        load_before = os.getloadavg()[0]
        if leg == "classic":
            pipeline = bench_pipeline(self.kafka.bootstrap, topic.name, root, max_offsets)
            figures = {**supervised_run(self.spark, pipeline), "target": pipeline.target.path}
        else:
            figures = connect_run(self.server, self.kafka.bootstrap, topic, root, max_offsets)
        checked = audit(self.spark, figures.pop("target"), topic.uids_file)
        exact = (checked["rows"] == topic.unique and checked["duplicate_uids"] == checked["missing_uids"]
                 == checked["unexpected_uids"] == 0)
        assert exact, f"{leg} over {topic.name} is not exact: {checked}, {topic.unique:,} unique uids committed"
        assert figures["records"] == topic.records, \
            f"{leg} read {figures['records']} of {topic.records} records: {figures}"
        return {"leg": leg, **figures, "audit": checked,
                "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}

    def alternating(self, name: str, topic: Topic, max_offsets: int, reps: int, describe) -> list[dict]:
        runs = []
        for rep in range(reps):
            for leg in LEGS if rep % 2 == 0 else LEGS[::-1]:
                root = fresh_dir(self.work / name / f"{leg}-{rep}")
                run = {"rep": rep, **self.run(leg, topic, root, max_offsets)}
                log(f"  {name} {leg:7} rep {rep}: {describe(run)}, load {run['load_average'][0]:.1f}")
                runs.append(run)
        return runs


def throughput_figures(run: dict) -> str:
    run["records_per_second"] = round(run["records"] / run["seconds"], 1)
    return f"{run['seconds']:6.1f} s, {run['records_per_second']:8,.0f} records/s, {run['batches']} batches"


def l1_figures(run: dict) -> str:
    steady = run["batch_ms"][1:]  # batch 0 creates the table
    run["median_batch_ms"] = statistics.median(steady) if steady else None
    return f"{run['batches']} batches, median {run['median_batch_ms']:.0f} ms after the first"


# --- the figures -------------------------------------------------------------------------


def per_rep_ratio(runs: list[dict], figure: str) -> dict:
    """Connect over classic within each repetition; the median over repetitions."""
    by_rep: dict[int, dict[str, float]] = {}
    for run in runs:
        by_rep.setdefault(run["rep"], {})[run["leg"]] = run[figure]
    ratios = [legs["connect"] / legs["classic"] for _, legs in sorted(by_rep.items())]
    return {"median": round(statistics.median(ratios), 3), "per_rep": [round(r, 3) for r in ratios]}


def summarize(results: dict) -> dict:
    return {"throughput": per_rep_ratio(results["throughput"]["runs"], "records_per_second"),
            "l1": per_rep_ratio(results["l1"]["runs"], "median_batch_ms")}


def _median_of(runs: list[dict], leg: str, figure: str):
    values = [r[figure] for r in runs if r["leg"] == leg and r.get(figure) is not None]
    return round(statistics.median(values), 2) if values else None


def _per_rep(runs: list[dict], leg: str, figure: str, digits: int = 0) -> str:
    return ", ".join(f"{r[figure]:,.{digits}f}" for r in runs if r["leg"] == leg)


def text_report(results: dict) -> str:
    summary, machine_info, scale = results["summary"], results["machine"], results["scale"]
    loads = [value for part in ("throughput", "l1") for run in results[part]["runs"] for value in run["load_average"]]
    throughput, l1 = results["throughput"]["runs"], results["l1"]["runs"]
    flag = {"quick": " --quick", "smoke": " --smoke"}.get(scale["name"], "")
    lines = [f"### `bench/run connect{flag}`, {results['started_at']}, "
             f"{results['elapsed_seconds'] / 60:.1f} min", "",
             *report.machine_lines(machine_info),
             f"- load average (1 min) at the legs' starts and ends: {min(loads):.1f} to {max(loads):.1f}, "
             f"median {statistics.median(loads):.1f}",
             f"- data: {scale['records']:,} records ({results['data']['unique']:,} unique uids), "
             f"max_offsets_per_trigger {scale['max_offsets']:,}; L1 topic {scale['l1_records']:,} records in "
             f"{BATCH_RECORDS}-record batches; {results['reps']} repetitions; every leg's target held each "
             "committed uid once", "",
             "| ratio | what | median | per repetition |", "| --- | --- | --- | --- |",
             f"| throughput | records/s of the whole run, Connect / classic | {summary['throughput']['median']:.2f} "
             f"| {', '.join(f'{v:.2f}' for v in summary['throughput']['per_rep'])} |",
             f"| L1 on Connect | median batch ms at {BATCH_RECORDS} records, Connect / classic "
             f"| {summary['l1']['median']:.2f} | {', '.join(f'{v:.2f}' for v in summary['l1']['per_rep'])} |", "",
             "| leg | median s (throughput) | records/s per repetition | batches | median batch ms (L1) "
             "| per repetition | client s reading reports (L1, median) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for leg in LEGS:
        lines.append(f"| {leg} | {_median_of(throughput, leg, 'seconds')} | "
                     f"{_per_rep(throughput, leg, 'records_per_second')} | "
                     f"{_median_of(throughput, leg, 'batches'):.0f} | {_median_of(l1, leg, 'median_batch_ms'):,.0f} | "
                     f"{_per_rep(l1, leg, 'median_batch_ms')} | {_median_of(l1, leg, 'ledger_read_seconds') or '-'} |")
    return "\n".join(lines)


# --- the study ---------------------------------------------------------------------------


def classic_session():
    from ingest.platform.session import get_session

    return get_session("ingest-bench-classic", conf=SESSION_CONF, master="local[2]")


def run(args) -> dict:
    from dataclasses import asdict

    from ingest.kafka.local_broker import LocalKafka

    scale = SMOKE if args.smoke else QUICK if args.quick else FULL
    work = fresh_dir(BENCH / "work")
    started = time.perf_counter()
    results = {"scale": asdict(scale), "reps": args.reps, "machine": machine(),
               "started_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    server = BenchServer(work / "connect-server.log")
    # the broker before any gRPC client thread (tests/connect/conftest.py); a loaded machine is slow to start JVMs
    with LocalKafka(work_dir=fresh_dir(work / "kafka"), start_timeout_s=300) as kafka:
        log(f"producing {scale.records:,} + {scale.l1_records:,} records ({scale.name} run)")
        topic, _ = produce(kafka, work, "bench-events", scale.records)
        l1_topic, _ = produce(kafka, work, "bench-l1", scale.l1_records)
        warm_topic, _ = produce(kafka, work, "bench-small", scale.r4_records)
        results["data"] = {"records": topic.records, "unique": topic.unique, "l1_records": l1_topic.records}
        log("starting the Connect server apart, then the classic session")
        server.start()
        try:
            legs = Legs(classic_session(), kafka, server, work)
            log("warm-up: one untimed run of each leg")
            for leg in LEGS:
                legs.run(leg, warm_topic, fresh_dir(work / "warm-up" / leg), BATCH_RECORDS)
            log("throughput: a catch-up of several batches")
            results["throughput"] = {"runs": legs.alternating("throughput", topic, scale.max_offsets, args.reps,
                                                              throughput_figures)}
            log(f"L1: {BATCH_RECORDS}-record batches")
            results["l1"] = {"batch_records": BATCH_RECORDS,
                             "runs": legs.alternating("l1", l1_topic, BATCH_RECORDS, args.reps, l1_figures)}
            legs.spark.stop()
        finally:
            server.stop()
    results["machine"]["load_end"] = round(os.getloadavg()[0], 1)
    results["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    return results


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--client" in argv:
        return client_main(argv)
    parser = argparse.ArgumentParser(prog="bench/run connect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the suite's quick data (under 20 minutes on 2 cores)")
    parser.add_argument("--smoke", action="store_true", help="a tiny run that checks the study works")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every leg (default 3)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--keep-work", action="store_true", help="keep bench/work/ (tables, the server's log)")
    args = parser.parse_args(argv)
    results = run(args)
    results["summary"] = summarize(results)
    text = text_report(results)
    print("\n" + text)
    if not args.no_write:
        (RESULTS / "connect.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
        report.update_readme(RESULTS / "README.md", text, "connect")
    if not args.keep_work:
        import shutil

        shutil.rmtree(BENCH / "work", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
