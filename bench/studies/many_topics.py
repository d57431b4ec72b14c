"""Many topics, one job: what a table with data costs a batch (issue 55).

    bench/run many_topics [--quick] [--topics 200] [--records N] [--shapes 200,50,20,1]
                          [--rounds N] [--legs before,after] [--threads 8]

`--topics` topics (one partition each) of Debezium-shaped JSON, the converter's schema in
every message (`schemas.enable=true`), each table with a column of its own besides the five
they share, read by one pattern query into a table per topic with no schema in the YAML
(`cdc`, columns from the messages, soft deletes). Each batch is a
trigger of its own: the study produces the batch's changes, then runs the query
(`availableNow`) over the same checkpoint again, so a batch holds exactly one shape:

- `creation`: the widest shape's tables get their first changes (tables made; reported apart);
- then, each round, a batch per shape of `--records` changes (half inserts, 40% updates and
  10% deletes of keys the table holds) spread evenly over its tables: `1` one busy table,
  every other topic quiet (no record in the batch); `20`, `50`, `200` tables changing.
  Topics past the widest shape never have a record: quiet from the start.

Beside each shape's batch, `one_table`: the same number of records into one table (one
topic, the single-table path), a batch of its own in the same phase; a shape's T-ratio is
its batch time over that. Legs (`--legs`, each optionally `@threads`), side by side in one
Spark application (`local[2]`, FAIR scheduling), in alternating order from phase to phase,
each leg's batch its own freshly produced changes of the shape:

- `before`: the router as main had it at 6aa536a (`MainRouter` below: the raw batch cached
  as Kafka planned it, a partition per Kafka partition; its topics by a `distinct` of their
  own; no scheduler pool per table; 16 tables' decodes kept, as `formats.cdc` kept them;
  plans compiled);
- `compiled`: `ingest.batch.routing.TopicRouter` with Spark's plans compiled to Java, as it
  was before a batch of several tables evaluated them interpreted (`routing.INTERPRETED`);
- `after`: `ingest.batch.routing.TopicRouter` as it is.

The routers take turns over one checkpoint and one set of tables, with the same
`BatchProcessor` per table (the same app id: a replay-safe handover, as a restart is), so
they differ in the router's own work only and no leg pays a table's first batch twice; the
creation batch is the last leg's.

Per batch: seconds of the foreachBatch call and of the whole trigger; CPU seconds of this
Python process and of the Spark JVM (/proc, from the batch's start until its tables'
background work has settled); the tasks' own CPU (the executor's share, from Spark's status
API; the JVM's rest is the driver's); jobs and tasks (the background jobs counted apart).
At the end every table is read with delta-rs and compared with the changes produced for its
topic. `--quick`: 5,000 records a batch, shapes 50,20,1 (50 tables made), one round. The
default: 10,000 records, shapes 200,50,20,1, two rounds (200 tables made). Results go to
bench/results/many_topics.json (`--out` names another file); bench/results/README.md holds
the figures. The events: `bench.harness.database_changes`; the costs: `bench.harness.batch_costs`.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench import RESULTS
from bench.harness.batch_costs import Cpu, SparkStatus, compilations, load
from bench.harness.database_changes import PREFIX, Changes, produce
from ingest.batch import message_columns
from ingest.batch.formats import cdc as cdc_format
from ingest.batch.processor import BatchProcessor, payload_schema
from ingest.batch.routing import TopicRouter
from ingest.kafka.local_broker import LocalKafka, create_topic
from ingest.kafka.source import read_stream
from ingest.platform.caching import kept
from ingest.spec import template
from ingest.spec.loader import load_text

ONE = "one.all"  # the one_table leg's topic

def pipeline_for(bootstrap: str, root: Path, per_topic: bool):
    kafka: dict[str, Any] = {"bootstrap_servers": bootstrap, "starting_offsets": "earliest"}
    if per_topic:
        kafka["pattern"] = rf"{PREFIX}\..*"
        target, dead = str(root / "tables" / "${topic}"), str(root / "dead_letter" / "${topic}")
    else:
        kafka["topics"] = [ONE]
        target, dead = str(root / "one"), str(root / "one_dead_letter")
    document = {"name": "bench_db", "source": {"kafka": kafka, "format": "json"},
                "cdc": {"format": "debezium", "key": ["id"]},
                "target": {"path": target}, "checkpoint": str(root / "checkpoint"),
                "dead_letter": {"path": dead}}
    return load_text(yaml.safe_dump(document, sort_keys=False), "many_topics.yaml").pipeline


# Spark's plans compiled to Java (its default), set on the session, which the router then leaves
# as it is: the `before` and `compiled` legs
COMPILED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}

# main's kept decodes (`formats.cdc._BUILT_FOR` was 16): the `before` leg decodes through these
MAIN_STEPS = functools.lru_cache(maxsize=16)(cdc_format.json_steps.__wrapped__)


class MainRouter(TopicRouter):
    """The router's batch as main had it at 6aa536a, verbatim, with main's 16 kept decodes:
    the `before` leg."""

    def __call__(self, batch_df, batch_id: int) -> None:
        steps, cdc_format.json_steps = cdc_format.json_steps, MAIN_STEPS
        try:
            self._main_call(batch_df, batch_id)
        finally:
            cdc_format.json_steps = steps

    def _main_call(self, batch_df, batch_id: int) -> None:
        with ExitStack() as cached:
            raw = kept(batch_df, cached)  # read Kafka once, however many tables
            present = [row.topic for row in raw.select("topic").distinct().collect()]
            if self.pipeline.records_data_loss:
                self._record_lost_slices(raw.sparkSession, batch_id, present)
            # the columns from the messages: every table's envelope schemas in one pass
            envelopes = message_columns.envelope_schemas(raw) if self.pipeline.columns_from_messages else {}
            self._commit_all(raw, batch_id, template.tables_of(self.pipeline, present), envelopes)

    def _pool(self, session, table: str):
        return nullcontext()


@dataclass
class Leg:
    name: str  # one_table, before, after (with @threads when not the default)
    kind: str
    threads: int = 1
    pipeline: Any = None
    processor: Any = None
    settings: dict = field(default_factory=dict)  # runtime SQL settings for the leg's batches only


def make_legs(spark, bootstrap: str, work: Path, specs: list[str], threads: int, reports: list) -> list[Leg]:
    """one_table, then the routers. The routers share one pipeline (checkpoint, tables) and each
    table's `BatchProcessor`, so they differ in what the router does and nothing else: no leg pays
    another's first batch of a table (its txn version, topic ids, columns read once per processor)."""
    one = pipeline_for(bootstrap, work / "one_table", per_topic=False)
    legs = [Leg("one_table", "one_table", 1, one, BatchProcessor(one, payload_schema(spark, one),
                                                                 on_report=reports.append))]
    shared = pipeline_for(bootstrap, work / "per_topic", per_topic=True)
    tables: dict = {}
    for spec in specs:
        kind, _, count = spec.partition("@")
        router = MainRouter if kind == "before" else TopicRouter
        legs.append(Leg(spec, kind, int(count or threads), shared,
                        router(shared, on_report=reports.append, threads=int(count or threads), tables=tables),
                        COMPILED if kind in ("before", "compiled") else {}))
    return legs


def run_batch(spark, leg: Leg, status: SparkStatus, cpu: Cpu, reports: list) -> dict:
    """One trigger of the leg's query over what was produced since its last: its batch's figures."""
    marks = status.marks()
    seen: dict = {}
    reports_before = len(reports)

    def timed(batch_df, batch_id):
        seen["load"] = load()
        seen["compiled"] = compilations(spark)
        seen["cpu0"] = cpu.read()
        started = time.perf_counter()
        leg.processor(batch_df, batch_id)
        seen["seconds"] = time.perf_counter() - started
        seen["cpu1"] = cpu.read()
        seen["batch_id"] = batch_id

    for key, value in leg.settings.items():
        spark.conf.set(key, value)
    try:
        query = (read_stream(spark, leg.pipeline).writeStream.option("checkpointLocation", leg.pipeline.checkpoint)
                 .foreachBatch(timed).trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        leg.processor.settle()
    finally:
        for key in leg.settings:
            spark.conf.unset(key)
    settled = cpu.read()
    progress = [p for p in query.recentProgress if p.get("numInputRows")]
    if "cpu0" not in seen:
        raise RuntimeError(f"{leg.name}: the trigger ran no batch")
    counts = status.since(marks)
    compiled = compilations(spark)
    reports = reports[reports_before:]
    (py0, jvm0), (py1, jvm1) = seen["cpu0"], seen["cpu1"]
    return {"batch_id": seen["batch_id"], "seconds": seen["seconds"],
            "trigger_s": progress[-1]["durationMs"]["triggerExecution"] / 1000 if progress else None,
            "python_cpu_s": py1 - py0, "jvm_cpu_s": jvm1 - jvm0,
            "python_cpu_settled_s": settled[0] - py0, "jvm_cpu_settled_s": settled[1] - jvm0,
            "tables": len(reports), "records": sum(r.summary.read for r in reports),
            "dead_letters": sum(r.summary.dead_letters for r in reports),
            "compilations": None if compiled is None or seen["compiled"] is None else compiled - seen["compiled"],
            "load_at_start": seen["load"], "load_at_end": load(), **counts}


def expected_batches(changes: Changes, shape: int, records: int) -> list[tuple[str, list]]:
    per, extra = divmod(records, shape)
    return [(f"{PREFIX}.t{n:03d}", changes.events(f"{PREFIX}.t{n:03d}", per + (1 if n < extra else 0)))
            for n in range(shape)]


def check_contents(work: Path, changes: Changes) -> dict:
    """Every table read with delta-rs against the rows its topic's changes leave."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    checked, wrong = 0, []
    for topic in changes.live:
        path = work / "one_table" / "one" if topic == ONE else work / "per_topic" / "tables" / topic.replace(".", "_")
        rows = pa.table(QueryBuilder().register("t", DeltaTable(str(path))).execute(
            "SELECT id, first_name, email, balance FROM t WHERE NOT _deleted").read_all()).to_pylist()
        found = {r["id"]: (r["first_name"], r["email"], r["balance"]) for r in rows}
        checked += 1
        want = changes.live[topic]
        if found != want:
            wrong.append({"topic": topic, "missing": len(set(want) - set(found)), "extra": len(set(found) - set(want)),
                          "different": sum(found[k] != want[k] for k in set(found) & set(want))})
    return {"tables_checked": checked, "tables_wrong": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/run many_topics", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 records, shapes 50,20,1, one round")
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--shapes", default=None, help="tables changing per batch, widest first (made first)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--legs", default="before,after")
    parser.add_argument("--threads", type=int, default=8, help="table threads of a leg without @threads")
    parser.add_argument("--out", default="many_topics.json")
    args = parser.parse_args()
    records = args.records or (5_000 if args.quick else 10_000)
    shapes = sorted({int(n) for n in (args.shapes or ("50,20,1" if args.quick else "200,50,20,1")).split(",")},
                    reverse=True)
    if shapes[0] > args.topics:
        raise SystemExit(f"the widest shape ({shapes[0]}) has more tables than --topics ({args.topics})")
    rounds = args.rounds or (1 if args.quick else 2)

    from ingest.platform.session import get_session

    work = Path(tempfile.mkdtemp(prefix="bench-topics-"))
    broker = LocalKafka(work_dir=work / "kafka", start_timeout_s=600)  # a loaded machine starts it slowly
    broker.start()
    spark = get_session("bench-topics", master="local[2]", conf={
        "spark.sql.shuffle.partitions": "2", "spark.scheduler.mode": "FAIR",
        "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.retainedJobs": "200000",
        "spark.ui.retainedStages": "200000", "spark.ui.retainedTasks": "10", "spark.sql.ui.retainedExecutions": "100"})
    status, cpu, changes = SparkStatus(spark), Cpu(spark), Changes()
    runs: list[dict] = []
    reports: list = []
    contents: dict = {"tables_checked": 0, "tables_wrong": [], "note": "the run stopped before the check"}
    started = time.time()
    try:
        config = broker.client_config()
        for n in range(args.topics):
            create_topic(config, f"{PREFIX}.t{n:03d}")
        create_topic(config, ONE)
        legs = make_legs(spark, broker.bootstrap, work, args.legs.split(","), args.threads, reports)
        # the tables made (and the JVM warmed) by the last router leg: five changes per table
        phases = [("creation", shapes[0], [legs[0], legs[-1]])]
        phases += [(f"round {r}", shape, legs) for r in range(rounds) for shape in shapes]
        for number, (phase, shape, in_phase) in enumerate(phases):
            for leg in in_phase if number % 2 == 0 else list(reversed(in_phase)):
                count = records if phase != "creation" else 5 * shape
                produce(config, [(ONE, changes.events(ONE, count))] if leg.kind == "one_table"
                        else expected_batches(changes, shape, count))
                figures = run_batch(spark, leg, status, cpu, reports)
                runs.append({"phase": phase, "shape": shape, "leg": leg.name, **figures})
                print(f"{phase:<9} {shape:>3} tables {leg.name:<10} {figures['seconds']:7.2f}s "
                      f"(trigger {figures['trigger_s'] or 0:.2f}s) tables {figures['tables']} "
                      f"records {figures['records']} jobs {figures['jobs']} (+{figures['background_jobs']}) "
                      f"tasks {figures['tasks']} cpu py {figures['python_cpu_settled_s']:.1f} "
                      f"jvm {figures['jvm_cpu_settled_s']:.1f} tasks {figures['task_cpu_s']:.1f} "
                      f"compiled {figures['compilations']} "
                      f"load {figures['load_at_end']:.1f}", flush=True)
        contents = check_contents(work, changes)
    finally:
        spark.stop()
        broker.close()
        shutil.rmtree(work, ignore_errors=True)
        if runs:  # what ran, also when a leg failed
            report(runs, contents, {"records": records, "shapes": shapes, "rounds": rounds, "topics": args.topics,
                                    "legs": ["one_table", *args.legs.split(",")],
                                    "minutes": (time.time() - started) / 60, "cores": os.cpu_count()}, args.out)


def summarize(runs: list[dict]) -> list[dict]:
    """Per shape and leg: medians over the rounds, the T-ratio to one_table of the same phase,
    and the costs per table with data."""
    base = {(r["phase"], r["shape"]): r for r in runs if r["leg"] == "one_table"}
    rows = []
    for shape in sorted({r["shape"] for r in runs}, reverse=True):
        for leg in dict.fromkeys(r["leg"] for r in runs if r["leg"] != "one_table"):
            for steady in (False, True):
                mine = [r for r in runs if r["leg"] == leg and r["shape"] == shape
                        and (r["phase"] != "creation") == steady]
                if mine:
                    rows.append(_row(mine, base, shape, leg, "steady" if steady else "creation"))
    return rows


def _phase(run: dict) -> tuple[str, int]:
    return run["phase"], run["shape"]


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _row(mine: list[dict], base: dict, shape: int, leg: str, batch: str) -> dict:
    def per_table(key: str) -> float | None:
        value = _median(mine, key)
        return None if value is None else value / shape

    ones = [base[_phase(r)] for r in mine if _phase(r) in base]
    return {
        "shape": shape, "leg": leg, "batch": batch,
        "seconds": _median(mine, "seconds"), "one_table_s": _median(ones, "seconds"),
        "t_ratio": _ratio(mine, base, "seconds"), "trigger_ratio": _ratio(mine, base, "trigger_s"),
        "jobs_per_table": per_table("jobs"), "background_jobs_per_table": per_table("background_jobs"),
        "tasks_per_table": per_table("tasks"),
        "python_cpu_s_per_table": per_table("python_cpu_settled_s"),
        "jvm_cpu_s_per_table": per_table("jvm_cpu_settled_s"),
        "task_cpu_s_per_table": per_table("task_cpu_s"), "compilations_per_table": per_table("compilations"),
        "one_table": {key: _median(ones, key) for key in ("jobs", "background_jobs", "tasks", "python_cpu_settled_s",
                                                          "jvm_cpu_settled_s", "task_cpu_s", "compilations")},
        "load": [min(r["load_at_start"] for r in mine), max(r["load_at_end"] for r in mine)],
    }


def _ratio(mine: list[dict], base: dict, key: str) -> float | None:
    """The median over phases of a leg's figure over one_table's in the same phase."""
    ratios = [r[key] / base[_phase(r)][key] for r in mine
              if _phase(r) in base and r.get(key) and base[_phase(r)].get(key)]
    return statistics.median(ratios) if ratios else None


def _cell(value, width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def report(runs: list[dict], contents: dict, setup: dict, out: str) -> None:
    rows = summarize(runs)
    (RESULTS / out).write_text(json.dumps({**setup, "rows": rows, "contents": contents, "runs": runs}, indent=2,
                                          default=str))
    print(f"\n{setup['records']} records a batch, {setup['topics']} topics, {setup['minutes']:.1f} min")
    print("tables  leg         batch     seconds  one_table  T-ratio  jobs/t  tasks/t  py cpu/t  jvm cpu/t  "
          "task cpu/t")
    for r in rows:
        print(f"{r['shape']:>6}  {r['leg']:<10}  {r['batch']:<8}" + _cell(r["seconds"], 8) + _cell(r["one_table_s"], 11)
              + _cell(r["t_ratio"], 9) + _cell(r["jobs_per_table"], 8, 1) + _cell(r["tasks_per_table"], 9, 1)
              + _cell(r["python_cpu_s_per_table"], 10) + _cell(r["jvm_cpu_s_per_table"], 11)
              + _cell(r["task_cpu_s_per_table"], 11))
    print(f"contents: {contents['tables_checked']} tables read with delta-rs, "
          f"{len(contents['tables_wrong'])} differ from their source {contents['tables_wrong'][:5]}")


if __name__ == "__main__":
    main()
