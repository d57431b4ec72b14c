"""G1, growth with history: one ingest batch into a table after 1,000 commits / after 10.

Two targets are made the same way: ingest creates each (one real batch), then
tiny appends bring one to 10 commits and the other to 1,000. The appends are
written with delta-rs (the `deltalake` package the tests already use) so that
building the history takes a minute, not an hour of Spark jobs; each carries a
transaction id (as ingest's commits do), and checkpoints follow
`delta.checkpointInterval` 10 (Spark's default), so the log the next batch
replays is shaped like that of a pipeline with that many batches behind it.
Then, alternating, one ingest batch (a fresh checkpoint each time) runs into
each table; its time is the query's `durationMs.triggerExecution`.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

from bench.harness import datagen
from bench.harness.legs import bench_pipeline, fresh_dir, run_ingest
from bench.harness.runner import Part, log, main

SIZES = (10, 1000)
BATCH_RECORDS = 500


def _grow(path: str, commits: int) -> float:
    """Append tiny commits until the table has `commits` versions; the seconds it took."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    began = time.monotonic()
    table = DeltaTable(path)
    schema = table.schema().to_arrow() if hasattr(table.schema(), "to_arrow") else table.schema().to_pyarrow()
    schema = pa.schema(schema)
    version = table.version()
    while version + 1 < commits:
        version += 1
        row = {f.name: [None if f.nullable else _filler(f.type)] for f in schema}
        row["_uid"] = [f"history-{version:08d}"]
        batch = pa.Table.from_pydict(row, schema=schema)
        write_deltalake(path, batch, mode="append", configuration=None,
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app_id="bench-history", version=version)]))
    return time.monotonic() - began


def _filler(arrow_type):
    """A value for a column the table declares NOT NULL (`_ingested_at` and the Kafka
    coordinates ingest writes): delta-rs refuses a null there."""
    import datetime

    import pyarrow as pa

    if pa.types.is_timestamp(arrow_type):
        return datetime.datetime.now(datetime.timezone.utc)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return ""
    if pa.types.is_floating(arrow_type):
        return 0.0
    if pa.types.is_boolean(arrow_type):
        return False
    return 0


def _set_checkpoint_interval(spark, path: str) -> None:
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '10')")


def run_all(bench, reps: int, log) -> dict:
    topics = {}
    for size in SIZES:
        name = f"bench-g1-{size}"
        datagen.create_topic(bench.kafka.client_config(), name, 2)
        datagen.produce_topic(bench.kafka.client_config(), name, BATCH_RECORDS, True, bench.work, seed=size)
        topics[size] = name
    tables, built = {}, {}
    for size in SIZES:
        root = fresh_dir(bench.work / "g1" / f"table-{size}")
        seed_topic = f"bench-g1-seed-{size}"
        datagen.create_topic(bench.kafka.client_config(), seed_topic, 2)
        datagen.produce_topic(bench.kafka.client_config(), seed_topic, 50, True, bench.work, seed=size + 1)
        pipeline = bench_pipeline(bench.kafka.bootstrap, seed_topic, root, None)
        run_ingest(bench.spark, pipeline)
        _set_checkpoint_interval(bench.spark, pipeline.target.path)
        built[size] = round(_grow(pipeline.target.path, size), 1)
        tables[size] = pipeline.target.path
        log(f"  G1 table with {size} commits built ({built[size]} s of appends)")
    runs = []
    for rep in range(reps):
        for size in SIZES if rep % 2 == 0 else SIZES[::-1]:
            root = fresh_dir(bench.work / "g1" / f"run-{size}-{rep}")
            pipeline = bench_pipeline(bench.kafka.bootstrap, topics[size], root, None)
            pipeline = replace(pipeline, target=replace(pipeline.target, path=tables[size]))
            figures = {}
            reports = run_ingest(bench.spark, pipeline, figures=figures)
            run = {"commits": size, "rep": rep, "batches": len(reports),
                   "batch_ms": statistics.median(figures["batch_ms"]) if figures["batch_ms"] else None,
                   "jobs_per_batch": figures["jobs_per_batch"]}
            log(f"  G1 after {size:5} commits, rep {rep}: batch {run['batch_ms']} ms, "
                f"{run['jobs_per_batch']} jobs")
            runs.append(run)
    return {"sizes": list(SIZES), "batch_records": BATCH_RECORDS, "build_seconds": built, "runs": runs}


PART = Part("g1", "bench.studies.history", guarded=True,
            measure=lambda run: run_all(run.bench, run.reps, log),
            title=lambda scale: "G1: one batch after 1,000 commits / after 10")


if __name__ == "__main__":  # this part alone, kept beside the suite's results as g1.json
    sys.exit(main([PART], alone=PART))
