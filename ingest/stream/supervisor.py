"""Runs pipelines: one streaming query each in one Spark application.

`claim` needs no Spark, so it fails fast: take each checkpoint's lease and
ask the broker for its offsets (it is down, or refuses the credentials).
`start` then decides where to resume, applies the retention guard and starts
the queries; `wait` stops every query cleanly on request or when one fails.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable

from ingest.batch.lost_ranges import record_lost
from ingest.batch.merge import properties as table_properties
from ingest.batch.processor import BatchReport
from ingest.errors import IngestError, SpecErrors, first_line, first_lines
from ingest.kafka.checkpoint import read_state
from ingest.platform.builder import on_databricks
from ingest.platform.connect import (
    ConnectUnsupported,
    abandon,
    is_connect,
    pipeline_session,
    release,
    server_lost,
    unreachable,
)
from ingest.platform.files import local_path
from ingest.spec.locations import shared_locations, shown_location
from ingest.spec.model import Pipeline
from ingest.spec.sql_check import check_sql
from ingest.stream import recovery
from ingest.stream.connect_reports import LedgerReports, worker_failure
from ingest.stream.dead_letter_share import dead_letter_note, over_share, over_share_message
from ingest.stream.lease import Lease
from ingest.stream.log_store import single_driver_warning
from ingest.stream.maintenance import OptimizeSchedule
from ingest.stream.metrics import Metrics
from ingest.stream.orphan_query import end_previous
from ingest.stream.progress import CatchUp
from ingest.stream.query import start_query
from ingest.stream.store_lease import StoreLease, conditional_create


@dataclass(frozen=True)
class Outcome:
    pipeline: str
    batches: int
    error: str | None = None  # the one-paragraph story: pipeline, batch, offsets, cause
    batch_id: int | None = None  # the batch that failed, when known
    offsets: dict | None = None  # {topic: {partition: offset}} of that batch, or the last committed
    cause: BaseException | None = None


@dataclass
class _Running:
    pipeline: Pipeline
    lease: Lease | StoreLease
    watermarks: dict
    catch_up: CatchUp | None = None
    optimize: OptimizeSchedule | None = None
    query: Any = None  # pyspark's StreamingQuery once started
    processor: Any = None
    ledger_reports: LedgerReports | None = None  # on Spark Connect, where the reports come from
    session: Any = None  # on Spark Connect, the pipeline's own (`pipeline_session`)
    batches: int = 0
    over_share: tuple | None = None  # (batch id, end offsets, message): dead_letter.max_share exceeded


class ServerLost(IngestError):
    """The Spark Connect server stopped answering before the run's queries started."""


class Supervisor:
    def __init__(self, pipelines: list[Pipeline], once: bool,
                 on_report: Callable[[BatchReport, CatchUp], None],
                 on_note: Callable[[str], None], preflight: bool = True, fail_fast: bool = False,
                 server_apart: bool = False):
        """`preflight=False`: no broker check and no retention guard from the Python
        client (for a mechanism only Spark's Java client speaks); Spark's own client
        still fails the query on lost offsets unless allow_data_loss. `fail_fast`: the
        first failed pipeline stops them all (by default the others go on)."""
        self.pipelines, self.once, self.preflight, self.fail_fast = pipelines, once, preflight, fail_fast
        self.server_apart = server_apart  # a Connect server of its own: the checkpoints are on its disk
        self.on_report, self.on_note = on_report, on_note
        self.spark: Any = None  # the SparkSession, from start()
        self.metrics: Metrics | None = None
        self.running: list[_Running] = []
        self._stop = threading.Event()
        self._server_lost = False  # on Spark Connect: its server stopped answering
        self._maintenance: ThreadPoolExecutor | None = None  # compaction beside the batches

    def claim(self) -> None:
        """Leases and broker checks for every pipeline; on any failure none is held."""
        shared = shared_locations(self.pipelines)
        if shared:
            raise SpecErrors(shared)
        try:
            for pipeline in self.pipelines:
                lease = Lease(pipeline.name, pipeline.checkpoint, on_note=self.on_note,
                              on_this_disk=not self.server_apart)
                lease.acquire()
                self.running.append(_Running(pipeline, lease, {}))
                if self.preflight:
                    self.running[-1].watermarks = recovery.fetch_watermarks(pipeline)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for run in self.running:
            run.lease.release()

    def start(self, spark) -> None:
        self.spark = spark
        try:
            refused = [problem for run in self.running for problem in _spec_problems(spark, run.pipeline)]
            if refused:  # `validate`'s Spark checks: a row-changing transform, a non-deterministic uid
                raise SpecErrors(refused)
            self._store_leases()
            if is_connect(spark):
                self._own_sessions()
                if self.server_apart:  # where a killed client's query can outlive it
                    for run in self.running:
                        end_previous(spark, run.session or spark, run.pipeline, self.on_note)
            if any(_observed(p) for p in self.pipelines):
                self.metrics = Metrics(spark)
            for run in self.running:
                self._start_one(run)
        except BaseException as error:
            if is_connect(spark) and isinstance(error, Exception) and server_lost(error):
                self._lose_server()
                self._end_all()
                raise ServerLost(f"the Spark Connect server stopped answering while the run started "
                                 f"({unreachable(error)}); the next run resumes from the checkpoint") from None
            self._end_all()
            raise

    def _store_leases(self) -> None:
        """The lease of a checkpoint on an object store, taken through the session's file system
        where the store creates a file only if absent; where it does not, said at start."""
        for run in self.running:
            checkpoint = run.pipeline.checkpoint
            if local_path(checkpoint) is not None:
                continue
            offered = conditional_create(self.spark, checkpoint)
            if offered:
                lease = StoreLease(run.pipeline.name, checkpoint, self.spark, on_note=self.on_note)
                lease.acquire()
                run.lease = lease
                continue
            if on_databricks():  # its jobs keep one run per job (max concurrent runs)
                continue
            why = ("its store offers no conditional create" if offered is False else
                   "this session has no ingest jar to take it with (Spark Connect, spark-submit without it)")
            self.on_note(f"{run.pipeline.name}: no lease on checkpoint {checkpoint}: {why}, so a second copy "
                         "of this pipeline is not refused; run one copy per checkpoint (docs/operations.md)")

    def _lose_server(self) -> None:
        """Any further call would wait out the client's retries: the channels are dropped."""
        self._server_lost = True
        for session in [self.spark] + [run.session for run in self.running if run.session]:
            abandon(session)

    def _own_sessions(self) -> None:
        """On Connect each query starts from a session of the pipeline's own: its batches'
        txn ids and spark_conf go there, not on a session another pipeline's batches share."""
        for run in self.running:
            run.session = pipeline_session(self.spark, run.pipeline.spark_conf)
        if len(self.running) > 1 and any(run.session is None for run in self.running):
            raise ConnectUnsupported("several pipelines in one application need a session each on Spark "
                                     "Connect, and this server cannot clone one (CloneSession, Spark 4.2 "
                                     "and later); run each pipeline in an application of its own")

    def _start_one(self, run: _Running) -> None:
        pipeline, watermarks = run.pipeline, run.watermarks
        for changed in table_properties.apply(self.spark, pipeline):
            self.on_note(f"{pipeline.name}: {changed.table} {changed.location}: {changed.key} set to "
                         f"{changed.wanted!r} (was {changed.current!r})")
        plan = recovery.plan_start(self.spark, pipeline, watermarks)
        for note in plan.notes + recovery.check_gaps(pipeline, plan):
            self.on_note(note)
        if is_connect(self.spark) and run.session is None and pipeline.spark_conf:
            self.on_note(f"{pipeline.name}: spark_conf reaches the query but not its batches' MERGE on "
                         "Spark Connect yet")
        warning = single_driver_warning(pipeline, lambda key: self.spark.conf.get(key, None), on_databricks(),
                                        lambda location: conditional_create(self.spark, location))
        if warning:
            self.on_note(warning)
        if plan.gaps:  # check_gaps let them pass: on_data_loss is record
            record_lost(self.spark, pipeline, plan.gaps)
        if self.metrics is not None and _observed(pipeline):
            self.metrics.watch(pipeline, plan.resume_from)
        every = pipeline.operations.maintenance
        if every.optimize_every_batches or every.optimize_every_seconds:
            run.optimize = OptimizeSchedule(pipeline, time.monotonic)
            run.optimize.prepare(self.spark)
        lows = {t: {p: low for p, (low, _) in parts.items()} for t, parts in watermarks.items()}
        run.catch_up = CatchUp(pipeline.name, start=plan.resume_from or lows,
                               goal={t: {p: high for p, (_, high) in parts.items()}
                                     for t, parts in watermarks.items()})
        run.query, run.processor = start_query(
            run.session or self.spark, pipeline, once=self.once, starting_offsets=plan.starting_offsets,
            on_report=lambda report: self._reported(run, report))
        if is_connect(self.spark):
            run.ledger_reports = LedgerReports(self.spark, pipeline, run.query)

    def _reported(self, running: _Running, report: BatchReport) -> None:
        running.batches += 1
        report = replace(report, dead_letters_at=shown_location(running.pipeline.dead_letter.location))
        if self.metrics is not None:
            self.metrics.observe(report)
        running.catch_up.advance(report.summary.end_offsets)
        self.on_report(report, running.catch_up)
        if running.over_share is None and over_share(running.pipeline, report):
            # the query is stopped from the polling thread (`_poll`), not from the batch's
            running.over_share = (report.batch_id, report.summary.end_offsets,
                                  over_share_message(running.session or self.spark, running.pipeline, report))
        elif report.summary.dead_letters:  # their most frequent reason, read beside the next batch
            self._beside().submit(self._dead_letter_note, running, report)
        if running.optimize is not None and running.optimize.due(report.batch_id):
            self._beside().submit(self._optimize, running.optimize, report.pipeline)

    def _beside(self) -> ThreadPoolExecutor:
        if self._maintenance is None:
            self._maintenance = ThreadPoolExecutor(1, thread_name_prefix="ingest-maintenance")
        return self._maintenance

    def _dead_letter_note(self, running: _Running, report: BatchReport) -> None:
        try:
            self.on_note(dead_letter_note(running.session or self.spark, running.pipeline, report))
        except Exception as error:  # a note only: the batch line said where they are
            self.on_note(f"{report.pipeline} batch {report.batch_id}: the dead letters' reasons could not be read: "
                         f"{first_line(error, None)}")

    def _optimize(self, schedule: OptimizeSchedule, pipeline: str) -> None:
        """Beside the batches, not inside one: compaction that fails (a conflict that
        outlasts its retries, say) is told and the run goes on; the next one may do."""
        try:
            for done in schedule.run(self.spark):
                self.on_note(f"{pipeline}: {done.line()}")
        except Exception as error:
            self.on_note(f"{pipeline}: maintenance.optimize_every: compaction failed, the run goes on: "
                         f"{first_line(error, None)}")

    def request_stop(self) -> None:
        self._stop.set()
        _quiet_lost_gateway()

    def wait(self, poll_s: float = 0.5) -> list[Outcome]:
        """Until every query ended. A failed pipeline is reported at once and left
        stopped while the others go on (they share nothing but the JVM); with
        `fail_fast` the first failure stops them all."""
        outcomes: dict[str, Outcome] = {}
        try:
            while len(outcomes) < len(self.running):
                try:
                    self._poll(outcomes, poll_s)
                except Exception as error:
                    if is_connect(self.spark) and server_lost(error):
                        self._lose_server()
                    if self._driver_alive():
                        raise
                    self._driver_gone(outcomes, error)
                if self._stop.is_set() or (self.fail_fast and any(o.error for o in outcomes.values())):
                    self._stop_all()
        finally:
            self._end_all()
            if self._maintenance is not None:  # on a stop request, those queued do not start
                self._maintenance.shutdown(wait=True, cancel_futures=self._stop.is_set())
            for run in self.running:
                if run.optimize is not None:
                    run.optimize.close()
        return [outcomes[r.pipeline.name] for r in self.running]

    def _poll(self, outcomes: dict[str, Outcome], poll_s: float) -> None:
        for run in self.running:
            if run.pipeline.name in outcomes:
                continue
            if run.over_share is not None and run.query.isActive:
                run.query.stop()
            _await(run.query, poll_s / max(1, len(self.running)))
            active = run.query.isActive
            if run.ledger_reports is not None:  # after isActive: a query ended has no batch to come
                for report in run.ledger_reports.new():
                    self._reported(run, report)
            if not active:
                if run.processor is not None:
                    run.processor.settle()
                outcome = outcomes[run.pipeline.name] = self._outcome(run)
                if outcome.error and not self.fail_fast and len(outcomes) < len(self.running):
                    self.on_note(f"{outcome.error}\n{run.pipeline.name} is stopped; the other "
                                 "pipelines go on (--fail-fast stops them all)")

    def _driver_alive(self) -> bool:
        """Whether the driver JVM still answers with its SparkContext running (on Spark
        Connect: whether the session to the server is open and the server answered)."""
        if is_connect(self.spark):
            return not (self.spark.is_stopped or self._server_lost)
        try:
            return not self.spark.sparkContext._jsc.sc().isStopped()
        except Exception:  # py4j: the gateway itself is gone
            return False

    def _stopped_with_driver(self) -> bool:
        """A stop was requested and the driver JVM went with it: systemd's control-group
        mode signals every process of the unit at once, the JVM too, which then shuts
        down (or dies) while the queries are being stopped. That is the stop asked for;
        the signal may reach this process a moment after the JVM, hence the grace. A Connect
        server running apart is no process of the unit: its loss waits for no signal."""
        if self._server_lost and self.server_apart:
            return self._stop.is_set()
        return not self._driver_alive() and self._stop.wait(_STOP_GRACE_S)

    def _driver_gone(self, outcomes: dict[str, Outcome], error: BaseException) -> None:
        """Every pipeline still running ends: stopped if a stop was requested, else failed."""
        stopped = self._stopped_with_driver()
        if self._server_lost:  # its queries and their batches went with it
            gone = f"the Spark Connect server stopped answering under the run ({unreachable(error)})"
        else:
            gone = f"the Spark driver (JVM) stopped under the run: {first_line(error, None)}"
        for run in self.running:
            if run.pipeline.name not in outcomes:
                outcomes[run.pipeline.name] = Outcome(run.pipeline.name, run.batches) if stopped else Outcome(
                    run.pipeline.name, run.batches, f"pipeline {run.pipeline.name}: {gone}; the next run "
                    "resumes from the checkpoint", cause=error)

    def _stop_all(self) -> None:
        if self._server_lost:  # its queries went with it; asking would wait out the retries again
            return
        for run in self.running:
            try:
                if run.query is not None and run.query.isActive:
                    run.query.stop()
            except Exception:
                if self._driver_alive():
                    raise  # the JVM is gone otherwise: nothing is left to stop
        if self.metrics is not None:
            self.metrics.close()
        self.release()

    def _end_all(self) -> None:
        """Every query stopped, then the sessions the pipelines had of their own released."""
        try:
            self._stop_all()
        finally:
            for run in self.running:
                if run.session is not None and not self._server_lost:
                    release(run.session)
                run.session = None

    def _outcome(self, run: _Running) -> Outcome:
        if run.over_share is not None:
            batch_id, offsets, text = run.over_share
            return Outcome(run.pipeline.name, run.batches, text, batch_id, offsets)
        try:
            error = run.query.exception()
        except Exception as lost:  # the JVM went away between isActive and here
            if server_lost(lost):
                raise  # wait() ends every pipeline at once
            error = lost
        if error is None or self._stopped_with_driver():
            return Outcome(run.pipeline.name, run.batches)
        return self._failed(run, error)

    def _failed(self, run: _Running, error) -> Outcome:
        failure = getattr(run.processor, "failure", None)
        if failure is not None:
            batch_id, offsets, cause = failure
        elif run.ledger_reports is not None:  # on Connect the failure stayed in the worker
            batch_id, offsets, cause = worker_failure(self.spark, run.pipeline, error)
        else:
            batch_id, offsets, cause = None, None, error
        if offsets is None:
            state = read_state(self.spark, run.pipeline.checkpoint)
            batch_id = batch_id if batch_id is not None else state.planned_batch
            offsets = state.committed_offsets
            where = "after offsets"
        else:
            where = "offsets"
        position = " ".join(f"{t}/{p}:{o}" for t, parts in sorted((offsets or {}).items())
                            for p, o in sorted(parts.items())) or "unknown"
        text = (f"pipeline {run.pipeline.name} failed in batch {batch_id} ({where} {position}): "
                f"{first_lines(cause, 3)}")
        return Outcome(run.pipeline.name, run.batches, text, batch_id, offsets, cause)


_STOP_GRACE_S = 5.0


def _quiet_lost_gateway() -> None:
    """Once a stop is requested the JVM may go first (systemd signals every process of
    a unit): a batch still running on py4j's callback thread then finds it gone, and
    py4j logs each such call with a traceback, partly on the root logger. Nothing is
    wrong then; the stop's own outcome is what `run` reports."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(_not_a_py4j_send)


def _not_a_py4j_send(record: logging.LogRecord) -> bool:
    return record.getMessage() != "Exception while sending command."


def _spec_problems(spark, pipeline: Pipeline) -> list:
    from dataclasses import replace

    problems = [p for p in check_sql(pipeline, spark) if not p.warning]
    return [replace(p, file=p.file or pipeline.source_file) for p in problems]


def _observed(pipeline: Pipeline) -> bool:
    metrics = pipeline.operations.metrics
    return bool(metrics.prometheus_port or metrics.consumer_group)


def _await(query, seconds: float) -> None:
    """Wait a little; a failed query raises here, and its error is read by `_outcome`."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(seconds)
    except StreamingQueryException:
        pass

