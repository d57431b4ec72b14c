"""L1, the fixed cost per batch: small batches (500 records), ingest beside the plain append.

Both legs read the same topic with max_offsets_per_trigger 500 under the
available-now trigger, so each runs the same >= 20 batches; a batch's time is
the trigger's whole time from Spark's progress (`durationMs.triggerExecution`:
offsets, the batch itself, the checkpoint commit), and its jobs are counted from
Spark's status store: those the batch waits for apart from those of ingest's
background thread (`legs.JobCount`). Alternating order, one topic, one session.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace

from bench.harness.legs import LEG_FUNCTIONS, Topic, audit, fresh_dir
from bench.harness.runner import Part, log, main

BATCH_RECORDS = 500
LEGS = ("plain_append", "ingest")


def run_all(bench, topic: Topic, reps: int, log) -> dict:
    small = replace(bench, max_offsets=BATCH_RECORDS)
    runs = []
    for rep in range(reps):
        for leg in LEGS if rep % 2 == 0 else LEGS[::-1]:
            root = fresh_dir(bench.work / "l1" / f"{leg}-{rep}")
            outcome = LEG_FUNCTIONS[leg](small, topic, root)
            millis = outcome.extra["batch_ms"]
            run = {"leg": leg, "rep": rep, "records": outcome.records, "batches": outcome.extra["batches"],
                   "median_batch_ms": statistics.median(millis) if millis else None,
                   "p90_batch_ms": sorted(millis)[int(0.9 * (len(millis) - 1))] if millis else None,
                   "batch_ms": millis, "jobs_per_batch": outcome.extra["jobs_per_batch"],
                   "background_jobs_per_batch": outcome.extra["background_jobs_per_batch"],
                   "audit": audit(bench.spark, outcome.target, topic.uids_file)}
            log(f"  L1 {leg:13} rep {rep}: {run['batches']} batches, median {run['median_batch_ms']:.0f} ms, "
                f"{run['jobs_per_batch']} jobs per batch (+ {run['background_jobs_per_batch']} in the background), "
                f"duplicates {run['audit']['duplicate_uids']}")
            runs.append(run)
    return {"batch_records": BATCH_RECORDS, "runs": runs}


PART = Part("l1", "bench.studies.fixed_cost", guarded=True,
            measure=lambda run: run_all(run.bench, run.own_topic, run.reps, log),
            title=lambda scale: f"L1: fixed cost per batch, {BATCH_RECORDS}-record batches",
            topic_records=lambda scale: scale.l1_records)


if __name__ == "__main__":  # this part alone, kept beside the suite's results as l1.json
    sys.exit(main([PART], alone=PART))
