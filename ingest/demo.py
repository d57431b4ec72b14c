"""`ingest demo`: the whole promise, on one machine, in a few minutes.

1. Start the embedded Kafka broker and create the example pipeline's topic
   (3 partitions).
2. Produce sample orders with what real topics hold: producer retries (the
   same uid header re-sent under a new offset, in the same batch and in later
   ones), an aborted transaction, committed transactions (`produce_file`, the
   code behind `ingest produce`), and malformed records (bad JSON, wrong types,
   no uid header).
3. Run `ingest run pipelines/orders.yaml --once` as a child process with
   INGEST_FAULT, so it kills itself right after a batch's MERGE commits and
   before Spark checkpoints that batch: the worst moment. Run it again without
   the fault: the batch is replayed, Delta skips it (same transaction id), and
   the run goes on.
4. Count the tables and audit them against the topic with `ingest.audit.verify`.

Nothing here prints: `run_demo` reports each step to `say` and returns a
`DemoReport`. The broker is stopped whatever happens, Ctrl-C included.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from ingest.errors import IngestError
from ingest.kafka.produce import (
    UID_HEADER,
    Options,
    Record,
    Sender,
    Uuid7,
    produce_file,
)
from ingest.platform.files import tail

DEFAULT_ROOT = Path(".ingest/data")  # the same DATA_ROOT as conf/local.yaml
PIPELINE_FILE = Path("pipelines/orders.yaml")
PACKAGED_PIPELINE = Path(__file__).resolve().parent / "resources" / PIPELINE_FILE  # same text (tested)
MARKER = ".ingest-demo"  # lists the folders the demo made: only those are ever emptied
PARTITIONS = 3
CURRENCIES = ("EUR", "EUR", "USD", "GBP")
FIRST_TS = datetime(2026, 11, 2, 8, 0, tzinfo=timezone.utc)

Say = Callable[[str], None]


class DemoError(IngestError):
    """A step of the demo did not go as it must."""


@dataclass(frozen=True)
class DemoOptions:
    data_root: Path = DEFAULT_ROOT
    pipeline_file: Path | None = None  # default: pipelines/orders.yaml here, or in the source tree
    orders: int = 400
    max_offsets_per_trigger: int = 200  # three batches: the crash lands in the middle one
    crash_batch: int = 1
    python: str = sys.executable
    env: str = "local"  # conf/<env>.yaml fills the variables the demo does not set itself
    conf_dir: str | None = None


@dataclass(frozen=True)
class Sample:
    """What went into the topic."""

    orders: int  # distinct orders in committed writes: the uids the target must hold
    retries: int  # copies of an order re-sent with its uid under a new offset
    aborted: int  # records of the aborted transaction: never visible
    malformed: dict[str, int]  # kind -> count; each must become a dead letter
    jsonl_file: Path

    @property
    def produced(self) -> int:
        """Records a read_committed reader sees."""
        return self.orders + self.retries + sum(self.malformed.values())

    @property
    def expected_dead_letters(self) -> int:
        return sum(self.malformed.values())


@dataclass(frozen=True)
class Counts:
    target_rows: int
    unique_uids: int
    dead_letters: int
    dead_letters_by_stage: dict[str, int]


@dataclass(frozen=True)
class Audit:
    """`ingest.audit.verify`'s findings."""

    duplicates: int
    missing: int
    unaccounted: int
    ok: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Locations:
    data_root: Path
    target: str
    dead_letter: str
    checkpoint: str


@dataclass(frozen=True)
class DemoReport:
    sample: Sample
    counts: Counts
    audit: Audit
    crash_exit: int
    locations: Locations
    seconds: float

    @property
    def ok(self) -> bool:
        c, s = self.counts, self.sample
        exact = c.target_rows == c.unique_uids == s.orders and c.dead_letters == s.expected_dead_letters
        return exact and self.audit.ok


# --- the steps -------------------------------------------------------------------


def run_demo(options: DemoOptions = DemoOptions(), say: Say = lambda text: None) -> DemoReport:
    from ingest.kafka.local_broker import LocalKafka

    started = time.monotonic()
    root = options.data_root.expanduser().resolve()
    pipeline_file = find_pipeline_file(options.pipeline_file)
    # The folders are known before the broker starts: a refusal to empty one costs nothing.
    prepare_folders(root, load_demo_pipeline(pipeline_file, demo_environ(root, "localhost:9092", options),
                                             options))
    say("starting the embedded Kafka broker")
    broker = LocalKafka()
    try:
        broker.start()
        say(f"broker up at {broker.bootstrap}")
        environ = demo_environ(root, broker.bootstrap, options)
        pipeline = load_demo_pipeline(pipeline_file, environ, options)
        sample = produce_sample(broker, pipeline.source.kafka.topics[0], root / "sample", options.orders, say)
        crash_exit = crash_and_restart(options, pipeline_file, environ, root / "logs", say)
        counts, audit = count_and_verify(pipeline, say)
    finally:
        broker.close()
    locations = Locations(root, pipeline.target.path or pipeline.target.table,
                          pipeline.dead_letter.path or pipeline.dead_letter.table, pipeline.checkpoint)
    return DemoReport(sample, counts, audit, crash_exit, locations, time.monotonic() - started)


def demo_folders(root: Path, pipeline) -> list[Path]:
    """What one demo run writes under `root`: its pipeline's tables and checkpoint, the
    sample file and the runs' logs. The rest of DATA_ROOT (your own pipelines') is not the demo's."""
    written = [pipeline.target.path, pipeline.dead_letter.path, pipeline.checkpoint]
    folders = [Path(p).resolve() for p in written if p and "://" not in p and not p.startswith("dbfs:")]
    return [f for f in (*folders, root / "sample", root / "logs") if f.is_relative_to(root)]


def prepare_folders(root: Path, pipeline) -> list[Path]:
    """Empties the folders an earlier demo made; refuses to touch one it did not make
    (listed in no marker), so your own tables under the same DATA_ROOT are safe."""
    folders = demo_folders(root, pipeline)
    marker = root / MARKER
    made_by_demo = set(marker.read_text().split("\n")[1:]) if marker.is_file() else set()
    for folder in folders:
        name = str(folder.relative_to(root))
        if folder.exists() and any(folder.iterdir()) and name not in made_by_demo:
            raise DemoError(f"{folder} exists and was not made by the demo (not listed in {marker}); "
                            "choose another --data-root, or move it away")
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    names = sorted(made_by_demo | {str(f.relative_to(root)) for f in folders})
    marker.write_text("\n".join(["# made by `ingest demo`; the next demo run empties these folders only",
                                  *[n for n in names if n]]) + "\n")
    return folders


def find_pipeline_file(given: Path | None) -> Path:
    """--pipeline, else the project's pipelines/orders.yaml, else the copy in the package
    (an installed wheel has no project folder)."""
    candidates = [given] if given else [PIPELINE_FILE, PACKAGED_PIPELINE]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise DemoError(f"no pipeline file at {' or '.join(str(c) for c in candidates)}; "
                    "run the demo from the project folder or give --pipeline")


def demo_environ(root: Path, bootstrap: str, options: DemoOptions) -> dict[str, str]:
    """The variables pipelines/orders.yaml reads; they win over conf/local.yaml."""
    return {"KAFKA_BOOTSTRAP": bootstrap, "DATA_ROOT": str(root),
            "MAX_OFFSETS_PER_TRIGGER": str(options.max_offsets_per_trigger)}


def load_demo_pipeline(pipeline_file: Path, environ: dict[str, str], options: DemoOptions = DemoOptions()):
    from ingest.spec.loader import load_file

    pipeline = load_file(pipeline_file, options.env, {**os.environ, **environ}, options.conf_dir).pipeline
    if pipeline.uid.header != UID_HEADER or not pipeline.source.kafka.topics:
        raise DemoError(f"{pipeline_file}: the demo needs a topic list and uid.header {UID_HEADER!r}")
    return pipeline


# --- sample data ---------------------------------------------------------------------


def sample_order(number: int, rng: random.Random) -> dict:
    return {
        "order_id": f"o-{number:05d}",
        "customer": f"c-{rng.randrange(40):03d}",
        "amount": round(rng.uniform(5, 500), 2),
        "currency": rng.choice(CURRENCIES),
        "ts": (FIRST_TS + timedelta(minutes=5 * number)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def order_record(order: dict, uid: str | None) -> Record:
    headers = ((UID_HEADER, uid.encode()),) if uid else ()
    return Record(json.dumps(order).encode(), order["customer"].encode(), headers)


MALFORMED: dict[str, list[Any]] = {
    "bad JSON": [b'{"order_id": "o-bad-1", "amount": 12.5', b"order o-bad-2, 12.50 EUR",
                 b'{"order_id": "o-bad-3", amount: 7}', b"\xff\xfe not text"],
    "wrong types": [{"order_id": "o-bad-4", "amount": "12,50 EUR"}, {"order_id": "o-bad-5", "amount": [1, 2]},
                    {"order_id": "o-bad-6", "ts": "last tuesday"}, {"order_id": "o-bad-7", "ts": {"day": 3}}],
}


def produce_sample(broker, topic: str, folder: Path, count: int, say: Say) -> Sample:
    """First half with retries, an aborted transaction, malformed records, the second
    half from a JSON Lines file in committed transactions, then late retries."""
    from ingest.kafka.local_broker import create_topic

    create_topic(broker.client_config(), topic, partitions=PARTITIONS)
    say(f"created topic {topic!r} with {PARTITIONS} partitions; producing sample orders")
    config = broker.client_config()
    rng, new_uid = random.Random(7), Uuid7()
    orders = [sample_order(n, rng) for n in range(count)]
    first = [(order, new_uid()) for order in orders[: count // 2]]
    sender = Sender(config)
    retries = _send_with_retries(sender, topic, first)
    aborted = _aborted_transaction(config, topic, rng, count)
    malformed = _send_malformed(sender, topic, first[0][0])
    jsonl = _write_jsonl(folder / "orders-2.jsonl", orders[count // 2:])
    _produce_jsonl(config, topic, jsonl)
    retries += _send_late_retries(sender, topic, first)
    _flush(sender)
    sample = Sample(len(orders), retries, aborted, malformed, jsonl)
    say(f"produced {sample.produced} records: {sample.orders} orders, {sample.retries} producer retries "
        f"(same uid, new offset), {_kinds(malformed)}; plus {aborted} in an aborted transaction")
    return sample


def _send_with_retries(sender: Sender, topic: str, first) -> int:
    """Every 15th order is sent twice in a row, as a producer retry after a lost ack would."""
    retries = 0
    for number, (order, uid) in enumerate(first):
        sender.send(topic, order_record(order, uid))
        if number % 15 == 7:
            sender.send(topic, order_record(order, uid))
            retries += 1
    return retries


def _send_late_retries(sender: Sender, topic: str, first) -> int:
    """Copies that arrive much later, in another batch: the MERGE, not the batch, drops them."""
    late = [pair for number, pair in enumerate(first) if number % 15 == 3]
    for order, uid in late:
        sender.send(topic, order_record(order, uid))
    return len(late)


def _aborted_transaction(config: dict, topic: str, rng: random.Random, count: int, size: int = 25) -> int:
    txn = Sender(config, transactional_id=f"ingest-demo-{os.getpid()}")
    txn.begin()
    new_uid = Uuid7()
    for number in range(size):
        txn.send(topic, order_record(sample_order(count + number, rng), new_uid()))
    txn.flush()
    txn.abort()
    return size


def _send_malformed(sender: Sender, topic: str, good_order: dict) -> dict[str, int]:
    new_uid = Uuid7()
    for value in MALFORMED["bad JSON"]:
        sender.send(topic, Record(value, None, ((UID_HEADER, new_uid().encode()),)))
    for order in MALFORMED["wrong types"]:
        sender.send(topic, Record(json.dumps(order).encode(), None, ((UID_HEADER, new_uid().encode()),)))
    without_uid = [{**good_order, "order_id": f"o-nouid-{n}"} for n in range(3)]
    for order in without_uid:
        sender.send(topic, order_record(order, None))
    return {"bad JSON": len(MALFORMED["bad JSON"]), "wrong types": len(MALFORMED["wrong types"]),
            "no uid header": len(without_uid)}


def _write_jsonl(path: Path, orders: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(order) + "\n" for order in orders))
    return path


def _produce_jsonl(config: dict, topic: str, path: Path) -> None:
    options = Options(topic, key_field="customer", transactional=True, transaction_size=100)
    summary = produce_file(path, options, config)
    if not summary.ok:
        raise DemoError(f"producing {path} failed: {'; '.join(summary.errors) or summary}")


def _flush(sender: Sender) -> None:
    left = sender.flush()
    failed = sender.deliveries.failed
    if left or failed:
        raise DemoError(f"sample records not delivered: {failed} failed, {left} unconfirmed; "
                        + "; ".join(sender.deliveries.errors))


def _kinds(malformed: dict[str, int]) -> str:
    return ", ".join(f"{count} with {kind}" if kind == "no uid header" else f"{count} {kind}"
                     for kind, count in malformed.items())


# --- the runs --------------------------------------------------------------------------


def crash_and_restart(options: DemoOptions, pipeline_file: Path, environ: dict[str, str],
                      logs: Path, say: Say) -> int:
    """Run 1 dies at the fault point; run 2 finishes. Returns run 1's exit status."""
    fault = f"after_target_commit:batch={options.crash_batch}"
    say(f"run 1: `ingest run {pipeline_file.name} --once` with INGEST_FAULT={fault}: it kills itself "
        f"after batch {options.crash_batch}'s MERGE commits, before Spark checkpoints the batch")
    crashed = run_pipeline(options.python, pipeline_file, environ, logs / "run-1.log", say, fault,
                           _env_arguments(options))
    if crashed == 0:
        raise DemoError(f"run 1 finished without reaching batch {options.crash_batch}: "
                        "too few batches for the crash (lower --max-offsets)")
    if crashed != -signal.SIGKILL:
        raise DemoError(f"run 1 failed (exit {crashed}) before the planned crash:\n"
                        + _log_tail(logs / "run-1.log"))
    say(f"run 1 died as planned (killed by SIGKILL); batch {options.crash_batch} is in the table "
        "but not in the checkpoint")
    say("run 2: the same command without the fault; it replays that batch, which Delta skips "
        "(same transaction id), and goes on")
    finished = run_pipeline(options.python, pipeline_file, environ, logs / "run-2.log", say,
                            extra=_env_arguments(options))
    if finished != 0:
        raise DemoError(f"run 2 failed (exit {finished}):\n" + _log_tail(logs / "run-2.log"))
    return crashed


def _log_tail(path: Path) -> str:
    return tail(path, 25, missing=f"(no log at {path})")


def _env_arguments(options: DemoOptions) -> list[str]:
    return ["--env", options.env] + (["--conf-dir", options.conf_dir] if options.conf_dir else [])


def run_pipeline(python: str, pipeline_file: Path, environ: dict[str, str], log: Path, say: Say,
                 fault: str | None = None, extra: list[str] | None = None) -> int:
    """`ingest run FILE --once` in a child process: its stdout relayed, its stderr in `log`."""
    env = {**os.environ, **environ, "PYTHONUNBUFFERED": "1"}
    # No Spark UI for a run that lasts a minute (a builder setting would still win).
    env.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
    env.pop("INGEST_FAULT", None)
    if fault:
        env.update({"INGEST_FAULT": fault, "INGEST_FAULT_CONFIRM": "crash"})
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [python, "-m", "ingest", "run", str(pipeline_file), "--once", *(extra or [])]
    with open(log, "wb") as errors:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, env=env, text=True)
        try:
            for line in child.stdout:
                say("  | " + line.rstrip())
            return child.wait()
        finally:
            _stop(child)


def _stop(child: subprocess.Popen) -> None:
    """Interrupted: ask the child to stop cleanly (SIGINT, as Ctrl-C in a terminal
    does), give it time, then insist."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=10)



# --- counts and audit ---------------------------------------------------------------------

AUDIT_SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}


def count_and_verify(pipeline, say: Say) -> tuple[Counts, Audit]:
    from pyspark.sql import SparkSession

    from ingest.platform.session import get_session

    say("counting the tables and auditing them against the topic")
    ours = SparkSession.getActiveSession() is None
    spark = get_session("ingest-demo", conf=AUDIT_SPARK_CONF, master="local[2]")
    if getattr(spark, "_jvm", None) is not None:  # a Connect server keeps its own log level
        spark.sparkContext.setLogLevel("ERROR")  # the demo's console is for its own story
    try:
        return table_counts(spark, pipeline), audit(spark, pipeline)
    finally:
        if ours:
            spark.stop()


def table_counts(spark, pipeline) -> Counts:
    from pyspark.sql import functions as F

    target = _read(spark, pipeline.target.path, pipeline.target.table)
    figures = target.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct("_uid").alias("uids")).first()
    dead = _read(spark, pipeline.dead_letter.path, pipeline.dead_letter.table)
    by_stage = {row.stage: row["count"] for row in dead.groupBy("stage").count().collect()}
    return Counts(figures.rows, figures.uids, sum(by_stage.values()), by_stage)


def _read(spark, path: str | None, table: str | None):
    return spark.read.table(table) if table else spark.read.format("delta").load(path)


def audit(spark, pipeline) -> Audit:
    from ingest.audit.verify import verify

    report = verify(spark, pipeline)
    return Audit(report.duplicates, report.missing, report.unaccounted, report.ok, tuple(report.notes))
