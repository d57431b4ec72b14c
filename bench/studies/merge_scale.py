"""R2: one MERGE batch into a large table against the same batch into an empty one.

The large table is written directly by Spark: `rows` events spread over the 10
days before the batch, in `files` files, each file a contiguous range of the
ingestion order (as a stream of appends lays them out), so file min/max stats
are tight. Time-ordered uids (UUIDv7) rise with that order; random uids
(UUIDv4) do not, and only `dedup_horizon`'s time bound can prune them.

Each run is one real batch: `ingest`'s query on a topic of `batch` records
(2% duplicates, half of them re-sends of the table's most recent records), into
the large table (put back to its built version afterwards with RESTORE) or a
fresh empty table with the same schema.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

from bench.harness.datagen import create_topic, produce_topic
from bench.harness.legs import Topic, audit, bench_pipeline, fresh_dir, run_ingest
from bench.harness.meter import Meter, merge_files
from bench.harness.runner import Part, log, main

TARGET_SCHEMA = ("_uid STRING, event_id STRING, user_id STRING, session_id STRING, event_type STRING, "
                 "page STRING, referrer STRING, country STRING, device STRING, amount DOUBLE, "
                 "ts TIMESTAMP, _topic STRING, _partition INT, _offset BIGINT, "
                 "_kafka_timestamp TIMESTAMP, _ingested_at TIMESTAMP")
HISTORY_DAYS = 10
HORIZON = ("ts", "1 hour", 3600)


@dataclass(frozen=True)
class R2Leg:
    name: str
    time_ordered: bool
    bounded: bool
    horizon: bool


R2_LEGS = (
    R2Leg("v7_bounded", time_ordered=True, bounded=True, horizon=False),
    R2Leg("v7_naive", time_ordered=True, bounded=False, horizon=False),
    R2Leg("v4_horizon", time_ordered=False, bounded=True, horizon=True),
)


@dataclass
class Prepared:
    table: str
    versions: list[int]  # after each appended part; the last is the full table
    rows: int
    files: int
    build_seconds: float
    topic: Topic

    @property
    def version(self) -> int:
        return self.versions[-1]

    def rows_at(self, version: int) -> int:
        return self.rows * (self.versions.index(version) + 1) // len(self.versions)


def _uuid_sql(time_ordered: bool) -> str:
    r1 = "lower(lpad(hex(xxhash64(id, 'r1')), 16, '0'))"
    r2 = "lower(lpad(hex(xxhash64(id, 'r2')), 16, '0'))"
    variant = "element_at(array('8', '9', 'a', 'b'), cast(pmod(id, 4) AS INT) + 1)"
    if time_ordered:
        ms = "lower(lpad(hex(ts_ms), 12, '0'))"
        return (f"concat(substr({ms}, 1, 8), '-', substr({ms}, 9, 4), '-7', substr({r1}, 1, 3), '-', "
                f"{variant}, substr({r1}, 4, 3), '-', substr({r1}, 7, 12))")
    return (f"concat(substr({r1}, 1, 8), '-', substr({r1}, 9, 4), '-4', substr({r1}, 13, 3), '-', "
            f"{variant}, substr({r2}, 1, 3), '-', substr({r2}, 4, 12))")


def history_rows(spark, first: int, end: int, rows: int, time_ordered: bool, end_ms: int):
    """Events `first` to `end` of `rows` past ones, one every few ms up to `end_ms`,
    shaped like the bench topic's."""
    step = HISTORY_DAYS * 86_400_000 // rows
    pick = "element_at(array({}), cast(pmod(id, {}) AS INT) + 1)"
    events = pick.format("'view', 'click', 'add_to_cart', 'checkout', 'search'", 5)
    countries = pick.format(", ".join(f"'{c}'" for c in "DE FR US GB NL ES IT PL SE JP".split()), 10)
    devices = pick.format("'android', 'ios', 'desktop-chrome', 'desktop-firefox', 'tablet'", 5)
    item = "lpad(cast(pmod(xxhash64(id, 'i'), 100000) AS STRING), 5, '0')"
    return (spark.range(first, end)
            .selectExpr("id", f"{end_ms} - ({rows} - 1 - id) * {step} AS ts_ms")
            .selectExpr("id", "ts_ms", f"{_uuid_sql(time_ordered)} AS _uid")
            .selectExpr(
                "_uid", "_uid AS event_id",
                "concat('user-', lpad(cast(pmod(xxhash64(id, 'u'), 1000000) AS STRING), 7, '0')) AS user_id",
                "lower(lpad(hex(xxhash64(id, 's')), 16, '0')) AS session_id",
                f"{events} AS event_type",
                f"concat('/catalog/category-', lpad(cast(pmod(id, 97) AS STRING), 2, '0'), '/item-', {item}, "
                "'?variant=', cast(pmod(id, 12) AS STRING)) AS page",
                f"concat('https://www.example.com/search?q=item+', {item}, '&page=', "
                "cast(pmod(id, 9) + 1 AS STRING)) AS referrer",
                f"{countries} AS country", f"{devices} AS device",
                "round(pmod(xxhash64(id, 'a'), 49900) / 100.0 + 1, 2) AS amount",
                "timestamp_millis(ts_ms) AS ts", "'bench-history' AS _topic",
                "cast(pmod(id, 2) AS INT) AS _partition", "id DIV 2 AS _offset",
                "timestamp_millis(ts_ms) AS _kafka_timestamp", "timestamp_millis(ts_ms) AS _ingested_at"))


def _as_target(spark, frame):
    schema = spark.createDataFrame([], TARGET_SCHEMA).schema
    return frame.select(*[frame[f.name].cast(f.dataType).alias(f.name) for f in schema.fields])


def create_empty(spark, path: str) -> None:
    from ingest.batch.merge.target import create_table
    from ingest.spec.model import Target

    create_table(spark, Target(path=path), spark.createDataFrame([], TARGET_SCHEMA))


def build_table(spark, path: str, rows: int, files: int, time_ordered: bool, steps: int) -> list[int]:
    """The large target, appended in `steps` parts in ingestion order; the Delta version after each."""
    from delta.tables import DeltaTable

    create_empty(spark, path)
    end_ms = time.time_ns() // 1_000_000 - 5 * 60_000  # the table ends 5 minutes before the batch
    versions = []
    for step in range(steps):
        first, end = rows * step // steps, rows * (step + 1) // steps
        (_as_target(spark, history_rows(spark, first, end, rows, time_ordered, end_ms))
         .repartitionByRange(max(1, files // steps), "ts").sortWithinPartitions("ts")
         .write.format("delta").mode("append").save(path))
        versions.append(DeltaTable.forPath(spark, path).history(1).collect()[0].version)
    return versions


def most_recent(spark, path: str, count: int = 2000) -> list[tuple[str, int]]:
    rows = (spark.read.format("delta").load(path).orderBy("ts", ascending=False).limit(count)
            .selectExpr("_uid", "unix_millis(ts) AS ms").collect())
    return [(r._uid, r.ms) for r in rows]


def prepare(bench, time_ordered: bool, scale) -> Prepared:
    """Builds the large table, then produces the batch topic (so v7 batch uids come after)."""
    kind = "v7" if time_ordered else "v4"
    table = str(fresh_dir(bench.work / f"r2-{kind}") / "table")
    started = time.perf_counter()
    versions = build_table(bench.spark, table, scale.r2_rows, scale.r2_files, time_ordered, scale.r2_steps)
    build_seconds = time.perf_counter() - started
    name = f"r2-batch-{kind}"
    create_topic(bench.kafka.client_config(), name, bench.partitions)
    produced = produce_topic(bench.kafka.client_config(), name, scale.r2_batch, time_ordered,
                             bench.work, recent=most_recent(bench.spark, table))
    topic = Topic(name, bench.partitions, produced.sent, produced.unique, produced.uids_file)
    return Prepared(table, versions, scale.r2_rows, scale.r2_files, round(build_seconds, 1), topic)


def run_once(bench, leg: R2Leg, prepared: Prepared, version: int | None, rep: int, check: bool) -> dict:
    """One batch into the large table at `version` (None: a fresh empty table).
    The large table is restored to its full version afterwards."""
    from delta.tables import DeltaTable

    into = "empty" if version is None else "large" if version == prepared.version else "partial"
    root = fresh_dir(bench.work / "r2-runs" / f"{leg.name}-{into}-{version}-{rep}")
    pipeline = bench_pipeline(bench.kafka.bootstrap, prepared.topic.name, root, None,
                              HORIZON if leg.horizon else None)
    if version is None:
        create_empty(bench.spark, pipeline.target.path)
    else:
        pipeline = replace(pipeline, target=replace(pipeline.target, path=prepared.table))
        if version != prepared.version:
            DeltaTable.forPath(bench.spark, prepared.table).restoreToVersion(version)
    bench.sql.mark()
    with Meter(bench.spark) as meter:
        reports = run_ingest(bench.spark, pipeline, leg.bounded)
    table = DeltaTable.forPath(bench.spark, pipeline.target.path)
    merge = table.history(1).collect()[0]
    files = merge_files(bench.sql.since_mark())
    result = {
        "leg": leg.name, "into": into, "rep": rep,
        "table_rows": 0 if version is None else prepared.rows_at(version),
        "batches": len(reports), "records": sum(r.summary.read for r in reports),
        "batch_seconds": round(sum(r.seconds for r in reports), 3),
        "merge_seconds": int(merge.operationMetrics.get("executionTimeMs", 0)) / 1000,
        "query_seconds": round(meter.usage.seconds, 3),
        "files_scanned": files[-1]["files_scanned"] if files else None,
        "files_in_table": files[-1]["files_before_skipping"] if files else None,
    }
    if check:
        result["audit"] = _audit(bench.spark, pipeline.target.path, prepared, into == "large")
    if version is not None:
        table.restoreToVersion(prepared.version)
    return result


def _audit(spark, path: str, prepared: Prepared, into_large: bool) -> dict:
    """Into the large table the row count is known; into an empty one the re-sent
    history records are new, so only duplicates and missing batch uids are checked."""
    found = audit(spark, path, prepared.topic.uids_file)
    found["expected_rows"] = prepared.rows + prepared.topic.unique if into_large else None
    return found


def schedule(reps: int) -> list[tuple[R2Leg, bool, int]]:
    """Every (leg, large or empty) once per repetition; odd repetitions in reverse order."""
    runs = []
    order = [(leg, large) for leg in R2_LEGS for large in (True, False)]
    for rep in range(reps):
        runs += [(leg, large, rep) for leg, large in (order if rep % 2 == 0 else order[::-1])]
    return runs


def _line(one: dict) -> str:
    return (f"  {one['leg']:11} into {one['into']:7} ({one['table_rows']:>10,} rows) rep {one['rep']}: "
            f"batch {one['batch_seconds']:.1f}s, MERGE {one['merge_seconds']:.1f}s, "
            f"files scanned {one['files_scanned']}/{one['files_in_table']}")


def run_all(bench, scale, reps: int, log) -> dict:
    prepared = {}
    for time_ordered in (True, False):
        kind = "UUIDv7" if time_ordered else "UUIDv4"
        log(f"R2: building the {scale.r2_rows:,}-row table ({kind}) in {scale.r2_files} files")
        prepared[time_ordered] = prepare(bench, time_ordered, scale)
        log(f"  built in {prepared[time_ordered].build_seconds}s")
    runs = []
    for leg, large, rep in schedule(reps):
        ready = prepared[leg.time_ordered]
        one = run_once(bench, leg, ready, ready.version if large else None, rep, check=rep == 0)
        log(_line(one))
        runs.append(one)
    runs += sweep(bench, prepared[True], log)
    tables = {("v7" if k else "v4"): {"rows": p.rows, "files": p.files, "build_seconds": p.build_seconds,
                                      "batch_records": p.topic.records, "batch_unique": p.topic.unique}
              for k, p in prepared.items()}
    return {"tables": tables, "runs": runs}


def sweep(bench, prepared: Prepared, log) -> list[dict]:
    """For the plot: one bounded and one naive batch at each partial size of the v7 table."""
    runs = []
    bounded, naive = R2_LEGS[0], R2_LEGS[1]
    for step, version in enumerate(prepared.versions[:-1]):
        for leg in (bounded, naive) if step % 2 == 0 else (naive, bounded):
            one = run_once(bench, leg, prepared, version, 0, check=False)
            log(_line(one))
            runs.append(one)
    return runs


PART = Part("r2", "bench.studies.merge_scale",
            measure=lambda run: run_all(run.bench, run.scale, run.reps, log))


if __name__ == "__main__":  # this part alone, kept beside the suite's results as r2.json
    sys.exit(main([PART], alone=PART))
