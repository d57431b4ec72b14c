"""`bench/run [--quick]`: side-by-side runs on the same data, reported as ratios.

Order of a run: start the embedded broker and pre-produce the topics once;
R4 (fresh processes, before this process starts its own Spark); then one Spark
application (local[2]) for a warm-up, the throughput legs, a profiled ingest
run, and R2. Writes bench/results/results.json, prints the table, draws
bench/results/merge_time.png and puts the figures into bench/results/README.md.
"""

from __future__ import annotations

import shutil
import sys

from bench.harness.legs import LEG_FUNCTIONS, THROUGHPUT_LEGS, Topic, audit, fresh_dir
from bench.harness.meter import Meter, merge_files
from bench.harness.runner import Bench, Part, log, main
from bench.profiles import driver_profile
from bench.studies import first_commit, fixed_cost, history, latency, merge_scale

STANDALONE = ("batch_settings", "cdc_merge", "cdc_path", "cdc_peer", "connect", "formats", "many_topics", "small_files",
              "jvm_profile")


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


LEGS = Part("legs", "bench.studies.suite", lambda run: run_legs(run.bench, run.topic, run.reps),
            title=lambda scale: "throughput legs")
# In the order they run (R4 before the Spark application in any case).
PARTS = (first_commit.PART, LEGS, fixed_cost.PART, latency.PART, history.PART, driver_profile.PART,
         merge_scale.PART)


def run_suite(argv=None) -> int:
    return main(PARTS, argv, description=__doc__.split("\n\n")[0],
                epilog=f"The other studies: bench/run STUDY [--help], STUDY one of {', '.join(STANDALONE)}.")


if __name__ == "__main__":
    sys.exit(run_suite())
