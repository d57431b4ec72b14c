"""`make soak` (`python -m bench.soak.run`): a continuous `ingest run` for `--minutes` (default
30, `SOAK_MINUTES`), its first two thirds with no fault, its last third with a SIGKILL of the
run every `--kill-every` seconds (started again as a scheduler would) and a broker restart;
then the tail drained with `ingest run --once`, `ingest verify`, and every acknowledged uid
counted in the target. Prints the figures and writes them as JSON (docs/production.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from bench import REPO
from bench.soak import analysis, folders, memory
from bench.soak.analysis import Batch, Sample
from bench.soak.workload import PARTITIONS, RunProcess, SteadyProducer, conf_with_heap, write_pipeline

RESTART_DELAY_S = 5.0  # what a scheduler waits before starting a failed run again


class Soak:
    def __init__(self, args, work: Path):
        from ingest.kafka.local_broker import LocalKafka, create_topic

        self.args, self.work = args, work
        self.began = time.monotonic()
        self.samples: list[Sample] = []
        self.batches: list[Batch] = []
        self.jvm: list[dict] = []
        self.events: list[dict] = []
        self.loads: list[float] = []
        self.jvm_flags = ""
        self.broker = LocalKafka(work_dir=work / "kafka", start_timeout_s=300).start()
        topic = "soak"
        create_topic(self.broker.client_config(), topic, PARTITIONS)
        self.pipeline_file = write_pipeline(work, topic, args.trigger, args.optimize_every)
        self.producer = SteadyProducer(self.broker.bootstrap, topic, args.rate)
        self.run: RunProcess | None = None
        self.env = conf_with_heap(work, args.driver_memory) if args.driver_memory else {}

    def clock(self) -> float:
        return time.monotonic() - self.began

    def event(self, what: str, **details) -> None:
        self.events.append({"at": round(self.clock(), 1), "event": what, **details})
        print(f"[{self.clock() / 60:5.1f} min] {what} {details or ''}", flush=True)

    def start_run(self, once: bool = False) -> RunProcess:
        return RunProcess(self.pipeline_file, self.broker.bootstrap, self.work / "run.log", self.batches.append,
                          self.clock, once=once, native_memory=not self.args.no_native_memory, extra_env=self.env)

    def watch(self, until: float, kill_at: list[float], broker_restart_at: float | None) -> int:
        """Sample until `until`, killing the run at each of `kill_at` and restarting the broker
        once; returns how often the run exited by itself (and was started again)."""
        own_exits, next_jvm = 0, 0.0
        while self.clock() < until:
            now = self.clock()
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                self.event("SIGKILL of the run", pid=self.run.pid)
                self.run.kill()
                time.sleep(RESTART_DELAY_S)
                self.run = self.start_run()
            if broker_restart_at is not None and now >= broker_restart_at:
                broker_restart_at = None
                self.event("broker stop")
                self.broker.stop()
                time.sleep(self.args.broker_down_s)
                self.broker.start()
                self.event("broker up")
            if not self.run.alive():
                own_exits += 1
                self.event("the run exited by itself", code=self.run.wait(10))
                time.sleep(RESTART_DELAY_S)
                self.run = self.start_run()
            if (sample := memory.sample(self.run.pid, self.clock())) is not None:
                self.samples.append(sample)
                self.loads.append(os.getloadavg()[0])
            if self.clock() >= next_jvm and (jvm := memory.jvm_of(self.run.pid)) is not None:
                if not self.jvm_flags:
                    self.jvm_flags = memory.flags(jvm)
                next_jvm = self.clock() + self.args.jvm_every
                if report := memory.jvm_report(jvm):
                    self.jvm.append({"at": round(self.clock(), 1), **{k: round(v, 1) for k, v in report.items()}})
            time.sleep(max(0.0, min(self.args.sample_every, until - self.clock())))
        return own_exits

    def soak(self) -> dict:
        minutes = self.args.minutes
        steady_end = minutes * 60 * (1 - self.args.fault_share)
        end = minutes * 60
        self.producer.start()
        self.run = self.start_run()
        self.event("steady phase", minutes=round(steady_end / 60, 1))
        steady_exits = self.watch(steady_end, [], None)
        live = memory.live_heap(jvm) if (jvm := memory.jvm_of(self.run.pid)) else {}
        kills = [steady_end + k for k in range(self.args.kill_every, int(end - steady_end), self.args.kill_every)]
        self.event("fault phase", minutes=round((end - steady_end) / 60, 1), kills=len(kills))
        fault_exits = self.watch(end, list(kills), steady_end + (end - steady_end) / 2)
        self.producer.stop()
        self.event("producer stopped", delivered=len(self.producer.delivered), failed=len(self.producer.failed))
        self.event("the run stopped", code=self.run.stop())
        drained = self.start_run(once=True).wait(900)
        self.event("tail drained with --once", code=drained)
        verify = subprocess.run([sys.executable, "-m", "ingest", "verify", str(self.pipeline_file)], cwd=REPO,
                                env={**os.environ, "KAFKA_BOOTSTRAP": self.broker.bootstrap, **self.env},
                                capture_output=True, text=True)
        (self.work / "verify.txt").write_text(verify.stdout + verify.stderr)
        self.event("ingest verify", code=verify.returncode)
        exact = analysis.exact_figures(self.producer.delivered, self.landed_uids())
        steady = analysis.phase_figures(self.samples, self.batches, 0.0, steady_end)
        faults = analysis.phase_figures(self.samples, self.batches, steady_end, end)
        faults.update(kills=len(kills), broker_restarts=1, own_exits=fault_exits)
        steady["own_exits"] = steady_exits
        jvm_steady = analysis.jvm_figures(self.jvm, 0.0, steady_end)
        return {
            "config": {"minutes": minutes, "rate": self.args.rate, "trigger": self.args.trigger,
                       "fault_share": self.args.fault_share, "kill_every_s": self.args.kill_every,
                       "optimize_every": self.args.optimize_every, "sample_every_s": self.args.sample_every,
                       "driver_memory": self.args.driver_memory or "the default (2g)"},
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load_average": round(sum(self.loads) / len(self.loads), 1) if self.loads else None,
            "steady": steady, "faults": faults,
            "files": folders.files_left(self.work / "tables" / "soak", self.work / "checkpoints" / "soak"),
            "exact": exact, "verify_exit": verify.returncode, "drain_exit": drained,
            "producer_failures": self.producer.failed[:10],
            "jvm_steady": jvm_steady, "jvm_flags": self.jvm_flags,
            "jvm": self.jvm, "live_heap_at_steady_end": live, "events": self.events,
            "samples": [asdict(s) for s in self.samples], "batches": [asdict(b) for b in self.batches],
        }

    def landed_uids(self) -> list[str]:
        from ingest.platform.session import get_session

        spark = get_session("ingest-soak-count")
        try:
            rows = spark.read.format("delta").load(str(self.work / "tables" / "soak")).select("_uid").collect()
            return [row[0] for row in rows]
        finally:
            spark.stop()

    def close(self) -> None:
        if self.run is not None and self.run.alive():
            self.run.kill()
        self.broker.close()


def options(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m bench.soak.run", description=__doc__)
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES") or 30),
                        help="the whole soak (default: $SOAK_MINUTES, else 30)")
    parser.add_argument("--rate", type=int, default=300, help="records a second (default 300)")
    parser.add_argument("--trigger", default="5 seconds", help="the pipeline's processing_time (default 5 seconds)")
    parser.add_argument("--fault-share", type=float, default=1 / 3,
                        help="the share of the soak with faults, at its end (default a third)")
    parser.add_argument("--kill-every", type=int, default=180, help="seconds between SIGKILLs (default 180)")
    parser.add_argument("--broker-down-s", type=float, default=10, help="how long the broker is away (default 10)")
    parser.add_argument("--driver-memory", default=None, metavar="SIZE",
                        help="the run's JVM heap, as session.driver_memory (default: ingest's, 2g)")
    parser.add_argument("--optimize-every", type=int, default=50, help="maintenance.optimize_every (batches)")
    parser.add_argument("--sample-every", type=float, default=10, help="seconds between RSS samples (default 10)")
    parser.add_argument("--jvm-every", type=float, default=60, help="seconds between jcmd reports (default 60)")
    parser.add_argument("--no-native-memory", action="store_true",
                        help="without the JVM's native memory tracking (its categories are then not reported)")
    parser.add_argument("--report", type=Path, default=None, metavar="SOAK_JSON",
                        help="run nothing: print the figures of a soak's JSON again, with the JVM's by third")
    parser.add_argument("--results", type=Path, default=None,
                        help="also write the JSON here (e.g. bench/results/soak.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    if args.report is not None:
        result = json.loads(args.report.read_text())
        steady_end = result["config"]["minutes"] * 60 * (1 - result["config"]["fault_share"])
        result["jvm_steady"] = analysis.jvm_figures(result["jvm"], 0.0, steady_end)
        print(analysis.render(result))
        return 0
    work = REPO / ".ingest" / "soak" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    work.mkdir(parents=True)
    soak = Soak(args, work)
    try:
        result = soak.soak()
    finally:
        soak.close()
    text = json.dumps(result, indent=1)
    (work / "soak.json").write_text(text)
    if args.results is not None:
        args.results.write_text(text)
    print(analysis.render(result))
    print(f"figures: {work / 'soak.json'}; the run's output: {work / 'run.log'}")
    steady = result["steady"]
    return 0 if result["exact"]["exact"] and result["verify_exit"] == 0 and steady["rss_ok"] \
        and steady["batch_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
