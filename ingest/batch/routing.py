"""Many topics, one job: each batch split by topic, each topic's table its own single-table batch.

A layer around `BatchProcessor`, which stays the one-table path unchanged: the
router finds the topics in the batch, renders the pipeline for each table
(`spec.template.for_topic`) and hands each table its rows. Each table's
processor commits under its own transaction id (app id = pipeline, checkpoint's
query id and the table), with its own topics' offsets in its own Delta commit
and its own dead letters. A crash between two tables' commits replays the
batch: the tables that committed skip it (their txn id), the others commit it.

The tables of a batch commit in parallel on a driver thread pool. The txn id is
session conf (`ledger.txn_settings`), and a session's conf is shared by every
thread, so each thread works on a clone of the batch's session (same settings,
conf of its own). Where a session cannot be cloned (Spark Connect), the tables
commit one after another on the batch's session.

What a table with data costs a batch is its own jobs (summary, MERGE, commit), not
a share of everyone's: the batch is read from Kafka once and cached in a few
partitions in topic order (`_gathered`), so a table's jobs run a task per core,
not one per Kafka partition of every topic; each table's jobs run in a FAIR
scheduler pool of their own (where the session schedules FAIR), so a big table's
tasks do not queue the small tables' behind them; the offset log's entries every
table's position reads are read once a batch; and a table with no record in the
batch is not visited at all (docs/many-topics.md, "What a table costs a batch").
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from pyspark.sql import DataFrame

from ingest.batch import lost_ranges, message_columns
from ingest.batch.commit import faults
from ingest.batch.commit.position import planned_range
from ingest.batch.processor import BatchProcessor, BatchReport, payload_schema
from ingest.errors import IngestError
from ingest.kafka import checkpoint as spark_checkpoint
from ingest.platform.caching import kept
from ingest.spec import template
from ingest.spec.model import Pipeline

log = logging.getLogger("ingest.run")

POOL = "spark.scheduler.pool"

# A batch that writes several tables evaluates their plans interpreted, not compiled to Java:
# each table's ~50 plans are its own (its columns, its bounds), so Spark compiles them
# again on the driver for every table in every batch, and a table of a few thousand records
# paid more for that than the compiled code saved it (50 tables changing, 5,000 records:
# the batch in 0.63 of the time; one table of 5,000: 0.79; bench/results/README.md, "many
# topics"). A setting the session was given explicitly stands.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

class NoSchema(IngestError):
    """A topic the pattern matched has no schema of its own and there is no shared one."""


def table_threads(pipeline: Pipeline) -> int:
    """The pipeline's `table_threads`; INGEST_TABLE_THREADS, when set, wins (the bench and
    tests compare thread counts without editing files)."""
    text = os.environ.get("INGEST_TABLE_THREADS", "").strip()
    return max(1, int(text)) if text.isdigit() else pipeline.operations.table_threads


@dataclass
class TopicRouter:
    """What foreachBatch calls for a pipeline whose target is a `${topic}` template."""

    pipeline: Pipeline
    on_report: Callable[[BatchReport], None] = lambda report: log.info(report.line())
    bounded: bool = True
    threads: int = 0  # 0: table_threads(pipeline)
    failure: tuple | None = None
    tables: dict[str, BatchProcessor] = field(default_factory=dict)  # table -> its processor
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.threads = self.threads or table_threads(self.pipeline)

    def __getstate__(self) -> dict:
        """On Spark Connect foreachBatch pickles the router to a worker: a lock cannot go,
        a new one is made there."""
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        with ExitStack() as cached, spark_checkpoint.read_once(self.pipeline.checkpoint):
            # the offset log's entries, which each table's position reads, read once too
            raw = kept(self._gathered(batch_df), cached)  # read Kafka once, however many tables
            if self.pipeline.columns_from_messages:
                # every table's envelope schemas in one pass, which lists the topics too
                envelopes = message_columns.envelope_schemas(raw)
                present = sorted(envelopes)
            else:
                envelopes = {}
                present = [row.topic for row in raw.select("topic").distinct().collect()]
            if self.pipeline.records_data_loss:
                self._record_lost_slices(raw.sparkSession, batch_id, present)
            self._commit_all(raw, batch_id, template.tables_of(self.pipeline, present), envelopes)

    def _gathered(self, batch_df: DataFrame) -> DataFrame:
        """The batch in as many partitions as the driver runs tasks at once, each in topic
        order. Spark plans a partition per Kafka partition with records, and every table's
        jobs filter the cached batch: as planned, a table's first stage would run a task for
        each of them, every topic's (200 busy topics: 200 tasks to find one topic's rows, and
        40,000 a batch). Gathered, a table runs a task per core, and in topic order the
        cache's column batches hold a topic's rows together, so their min/max statistics let
        a table's scan skip the batches of other topics. The same records: `coalesce` joins
        partitions without a shuffle, and nothing after depends on their order (the uid's
        ranking and the change order compare Kafka positions, not arrival)."""
        slots = _task_slots(batch_df)
        partitions = _partitions(batch_df) if slots is not None else None
        if slots is None or partitions is None or partitions <= slots:
            return batch_df  # as many tasks as cores at most already (or not known here)
        return batch_df.coalesce(slots).sortWithinPartitions("topic", "partition", "offset")

    def settle(self) -> None:
        """Once the query has ended: each table's work beside the batches, finished."""
        for processor in list(self.tables.values()):
            processor.settle()

    def _record_lost_slices(self, session, batch_id: int, present: list[str]) -> None:
        """The lost-range check of the topics the batch planned a range of and holds no
        record of: no table's processor runs for them, and its check (planned start
        against first record read) would be the one to find that retention deleted their
        whole slice. Before any table commits, as a processor records its own."""
        start, end = planned_range(session, self.pipeline.checkpoint, batch_id)
        if not end or not start:
            return
        absent = [topic for topic in end if topic not in present]
        gaps = lost_ranges.skipped_ranges(self.pipeline, {t: start.get(t, {}) for t in absent},
                                          {t: end[t] for t in absent}, first_read={}) if absent else []
        for gap in gaps:
            log.warning("%s batch %d: %s while the query ran (on_data_loss: record); recorded in the "
                        "dead letters of its table with stage lost", self.pipeline.name, batch_id,
                        gap.describe())
        lost_ranges.record_lost(session, self.pipeline, gaps)

    def _commit_all(self, raw: DataFrame, batch_id: int, groups: dict[str, list[str]],
                    envelopes: dict[str, list[str]]) -> None:
        session = raw.sparkSession
        clone = _cloner(session) if self.threads > 1 and len(groups) > 1 else None
        jobs = [(table, topics) for table, topics in sorted(groups.items())]
        if clone is None:
            with interpreted(session) if len(groups) > 1 else nullcontext():
                for done, (table, topics) in enumerate(jobs, start=1):
                    self._commit_table(raw, batch_id, table, topics, session, envelopes)
                    self._between_tables(done, len(jobs), batch_id)
            return
        with ThreadPoolExecutor(min(self.threads, len(jobs)), thread_name_prefix="ingest-table") as pool:
            futures = [pool.submit(self._commit_table, raw, batch_id, table, topics, clone(), envelopes)
                       for table, topics in jobs]
            for done, future in enumerate(as_completed(futures), start=1):
                future.result()  # the first failure fails the batch; Spark replays it
                self._between_tables(done, len(jobs), batch_id)

    def _commit_table(self, raw: DataFrame, batch_id: int, table: str, topics: list[str], session,
                      envelopes: dict[str, list[str]]) -> None:
        from pyspark.sql import functions as F

        rows = raw.where(F.col("topic").isin(*topics))
        if session is not raw.sparkSession:
            rows = DataFrame(rows._jdf, session)  # MERGE and txn conf on this thread's session
        processor = self._processor(table, topics[0], session)
        with self._pool(session, table):
            try:
                processor(rows, batch_id, {topic: envelopes[topic] for topic in topics if topic in envelopes}
                          if envelopes else None)
            except Exception:
                self.failure = processor.failure
                raise

    @contextmanager
    def _pool(self, session, table: str) -> Iterator[None]:
        """The table's jobs (and its background state's, whose thread inherits the property)
        in a FAIR scheduler pool of their own: Spark then shares the cores between the tables
        committing at once instead of running their jobs in order of submission, so a big
        table's stages do not hold the small tables' tasks back. A pool per table thread (a
        thread commits one table at a time), so an application has `table_threads` of them
        however many tables it writes; Spark makes each at its first job (weight 1, no
        minimum share). Under FIFO scheduling the property is ignored."""
        context = session.sparkContext if _has_jvm(session) else None
        if context is None:
            yield
            return
        before = context.getLocalProperty(POOL)
        context.setLocalProperty(POOL, f"ingest {threading.current_thread().name}")
        try:
            yield
        finally:
            context.setLocalProperty(POOL, before)

    def _processor(self, table: str, topic: str, session) -> BatchProcessor:
        with self._lock:
            processor = self.tables.get(table)
            if processor is None:  # a topic's first data: its table is created by its first MERGE
                pipeline = template.for_topic(self.pipeline, topic)
                if pipeline.source.format == "json" and pipeline.source.schema is None \
                        and not pipeline.columns_from_messages:
                    raise NoSchema(f"{self.pipeline.name}: topic {topic!r} has no schema; expected "
                                   f"it in source.schemas, or a source.schema for every topic")
                processor = BatchProcessor(pipeline, payload_schema(session, pipeline),
                                           on_report=self._reported(table), bounded=self.bounded,
                                           table_key=table)
                self.tables[table] = processor
            return processor

    def _reported(self, table: str) -> Callable[[BatchReport], None]:
        def report(batch: BatchReport) -> None:
            with self._lock:
                self.on_report(replace(batch, pipeline=f"{self.pipeline.name} -> {table}"))
        return report

    @staticmethod
    def _between_tables(done: int, total: int, batch_id: int) -> None:
        if done < total:  # some table of the batch has committed, another has not yet
            faults.point("between_tables", batch_id)


def _has_jvm(session) -> bool:
    return getattr(session, "_jsparkSession", None) is not None


def _task_slots(frame: DataFrame) -> int | None:
    """How many tasks the session's cluster runs at once (None: not known here, Spark Connect)."""
    if not _has_jvm(frame.sparkSession):
        return None
    return max(1, frame.sparkSession.sparkContext.defaultParallelism)


def _partitions(frame: DataFrame) -> int | None:
    """How many partitions Spark planned for `frame` (planning only: no job runs)."""
    try:
        return int(frame._jdf.rdd().getNumPartitions())
    except Exception as error:  # a frame without a JVM plan here: left as planned
        log.debug("the batch's partitions could not be counted: %s", error)
        return None


def _cloner(session) -> Callable[[], object] | None:
    """A function giving a clone of `session` (its settings, a conf of its own, plans
    interpreted unless the session says otherwise), or None."""
    jsession = getattr(session, "_jsparkSession", None)
    if jsession is None:
        return None
    from pyspark.sql import SparkSession

    unset = _unset(session, INTERPRETED)

    def clone():
        table_session = SparkSession(session.sparkContext, jsession.cloneSession())
        for key in unset:
            table_session.conf.set(key, INTERPRETED[key])
        return table_session
    return clone


@contextmanager
def interpreted(session) -> Iterator[None]:
    """`INTERPRETED` on `session` (the query's own) while its tables commit one after another."""
    unset = _unset(session, INTERPRETED) if _has_jvm(session) else []
    for key in unset:
        session.conf.set(key, INTERPRETED[key])
    try:
        yield
    finally:
        for key in unset:
            session.conf.unset(key)


def _unset(session, settings: dict[str, str]) -> list[str]:
    """The keys of `settings` that `session` was not given explicitly."""
    given = session.conf.getAll
    return [key for key in settings if key not in given]
