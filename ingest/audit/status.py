"""`ingest status`: where a pipeline stands, from its three witnesses.

Per partition: Kafka's earliest and end offsets, the offset in Spark's checkpoint
(the last committed batch), the offset recorded in the target's Delta log, and
the lag (end minus the offset the next run starts from). Then the last batch,
from the target's latest commit, and what any disagreement between the
witnesses means. Read-only; works before the first run, and with the broker down.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from ingest.batch.commit import ledger
from ingest.batch.commit.owner import OWNER
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.kafka.checkpoint import CheckpointState, read_state
from ingest.kafka.offsets import Offsets
from ingest.platform.delta import at_location, table_exists, table_property
from ingest.spec.locations import shown_location
from ingest.spec.model import Pipeline

NOTE, WARNING = "note", "warning"  # a warning is a reason to look: data may be at risk


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    earliest: int | None  # None: the broker did not answer
    end: int | None
    checkpoint: int | None  # next offset to read, as of the last committed batch
    delta_log: int | None  # furthest end offset recorded in the target's commits
    next_offset: int | None  # where the next run starts reading
    lag: int | None  # end - next_offset


@dataclass(frozen=True)
class LastBatch:
    batch_id: int
    version: int  # of the target table
    timestamp: str
    app_id: str
    source_rows: int | None  # MERGE source: one row per uid of the batch
    inserted: int | None
    updated: int | None
    dead_letters: int


@dataclass(frozen=True)
class Finding:
    level: str  # note | warning
    text: str


@dataclass(frozen=True)
class StatusReport:
    pipeline: str
    checkpoint: str
    target: str
    partitions: tuple[PartitionStatus, ...]
    last_committed_batch: int | None
    planned_batch: int | None
    table_exists: bool
    last_batch: LastBatch | None
    kafka_error: str | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return self.kafka_error is None and all(f.level != WARNING for f in self.findings)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class _Ledger:
    """What the target's Delta log says: recorded offsets and the latest commit of ours."""

    offsets: Offsets
    latest: tuple | None  # (history row, ledger entry)


def status(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None) -> StatusReport:
    """`only_topics`: one table of a pipeline with a table per topic (`per_table`),
    whose checkpoint also holds the other tables' topics."""
    marks, kafka_error = _watermarks(pipeline)
    state = read_state(spark, pipeline.checkpoint)
    if only_topics is not None:
        state = replace(state, committed_offsets={t: parts for t, parts in (state.committed_offsets or {}).items()
                                                  if t in only_topics})
    exists = table_exists(spark, pipeline.target)
    book = _read_ledger(spark, pipeline) if exists else _Ledger({}, None)
    partitions = _partitions(pipeline, marks, state, book.offsets)
    findings = _findings(pipeline, partitions, state, exists, book, kafka_error is None)
    findings += _writer(pipeline, table_property(spark, pipeline.target, OWNER) if exists else None)
    return StatusReport(
        pipeline=pipeline.name, checkpoint=shown_location(pipeline.checkpoint),
        target=shown_location(pipeline.target.location),
        partitions=partitions, last_committed_batch=state.last_committed_batch,
        planned_batch=state.planned_batch, table_exists=exists,
        last_batch=_last_batch(spark, pipeline, book.latest), kafka_error=kafka_error,
        findings=tuple(findings))


def _watermarks(pipeline: Pipeline) -> tuple[dict, str | None]:
    try:
        return kafka_admin.watermarks(pipeline.source.kafka), None
    except IngestError as error:
        return {}, str(error)


# --- the Delta log ------------------------------------------------------------------------


def _history(spark, location: str, is_table: bool):
    """(history row, ledger entry) of the live commits (not undone by a RESTORE) that carry a
    ledger entry, newest first."""
    table = at_location(spark, location, is_table)
    rows = table.history().select("version", "timestamp", "operation", "operationParameters",
                                  "operationMetrics", "userMetadata").collect()
    return [(row, entry) for row in ledger.live_commits(rows) if (entry := ledger.parse_metadata(row.userMetadata))]


def _read_ledger(spark, pipeline: Pipeline) -> _Ledger:
    """Offsets and the last batch from the target's log, as recovery reads them
    (every batch ends with a target commit; the dead letters commit before it)."""
    target = _ours(pipeline, _history(spark, pipeline.target.location, bool(pipeline.target.table)))
    offsets = ledger.recorded_offsets([(row.version, entry) for row, entry in target])
    return _Ledger(offsets, target[0] if target else None)


def _ours(pipeline: Pipeline, history) -> list:
    return [(row, entry) for row, entry in history if entry.get("pipeline") == pipeline.name]


def _last_batch(spark, pipeline: Pipeline, latest) -> LastBatch | None:
    if latest is None:
        return None
    row, entry = latest
    metrics = row.operationMetrics or {}
    return LastBatch(
        batch_id=int(entry.get("batch_id", -1)), version=row.version, timestamp=str(row.timestamp),
        app_id=str(entry.get("app_id", "")), source_rows=_metric(metrics, "numSourceRows"),
        inserted=_metric(metrics, "numTargetRowsInserted"), updated=_metric(metrics, "numTargetRowsUpdated"),
        dead_letters=_batch_dead_letters(spark, pipeline, entry))


def _metric(metrics, key: str) -> int | None:
    value = metrics.get(key)
    return int(value) if value is not None else None


def _batch_dead_letters(spark, pipeline: Pipeline, entry: dict) -> int:
    """The dead-letter commit of the same batch carries the same ledger entry."""
    where = pipeline.dead_letter
    if not table_exists(spark, where):
        return 0
    for row, other in _history(spark, where.location, bool(where.table)):
        if (other.get("app_id"), other.get("batch_id")) == (entry.get("app_id"), entry.get("batch_id")):
            metrics = row.operationMetrics or {}
            # a MERGE since the dead letters are merged on their coordinates; an append before
            return (_metric(metrics, "numTargetRowsInserted") or _metric(metrics, "numOutputRows") or 0)
    return 0


# --- per partition ------------------------------------------------------------------------


def _partitions(pipeline: Pipeline, marks, state: CheckpointState, recorded) -> tuple[PartitionStatus, ...]:
    committed = state.committed_offsets or {}
    rows = []
    for topic, partition in _partition_keys(marks, committed, recorded):
        earliest, end = marks.get(topic, {}).get(partition, (None, None))
        checkpoint = committed.get(topic, {}).get(partition)
        delta = recorded.get(topic, {}).get(partition)
        start = _next_offset(pipeline, state, topic, partition, checkpoint, delta, earliest, end)
        lag = end - start if end is not None and start is not None else None
        rows.append(PartitionStatus(topic, partition, earliest, end, checkpoint, delta, start, lag))
    return tuple(rows)


def _partition_keys(*sides) -> list[tuple[str, int]]:
    """Every (topic, partition) any of the {topic: {partition: ...}} mappings knows."""
    return sorted({(t, p) for side in sides for t, parts in side.items() for p in parts})


def _next_offset(pipeline, state, topic, partition, checkpoint, delta, earliest, end) -> int | None:
    """Spark resumes from its checkpoint; without one, the run resumes from the Delta log
    (recovery.plan_start); a partition neither has seen starts as configured."""
    if checkpoint is not None:
        return checkpoint
    if state.empty and delta is not None:
        return delta
    if not state.empty:
        return earliest  # Spark reads a partition it has not seen from the earliest offset
    configured = pipeline.source.kafka.starting_offsets
    if isinstance(configured, str):
        return end if configured == "latest" else earliest
    return configured.get(topic, {}).get(partition, earliest)


# --- what the disagreements mean ------------------------------------------------------------


def _findings(pipeline: Pipeline, partitions, state: CheckpointState, exists: bool, book: _Ledger,
              kafka_up: bool) -> list[Finding]:
    found = _overall(pipeline, state, exists, book)
    for p in partitions:
        found += _checkpoint_vs_delta(pipeline, p, exists, kafka_up)
        found += _kafka_vs_next(pipeline, p)
    return found


def _overall(pipeline: Pipeline, state: CheckpointState, exists: bool, book: _Ledger) -> list[Finding]:
    if state.empty and not book.offsets:
        start = pipeline.source.kafka.starting_offsets
        start = start if isinstance(start, str) else "the configured offsets"
        return [Finding(NOTE, f"not started yet: the first run reads from {start}")]
    found = []
    if state.empty:
        found.append(Finding(NOTE, f"no checkpoint at {shown_location(pipeline.checkpoint)}: the next run resumes from "
                                   "the offsets recorded in the Delta log, with a new app id"))
    if (state.planned_batch is not None and state.planned_batch != state.last_committed_batch):
        found.append(Finding(NOTE, f"batch {state.planned_batch} is planned in the checkpoint but not "
                                   "committed: a run stopped during it; the next run runs it again, and "
                                   "whatever of it reached Delta is skipped by its txn id"))
    if not state.empty and not exists:
        found.append(Finding(WARNING, f"the target {shown_location(pipeline.target.location)} does not exist but the "
                                      "checkpoint does: the table was removed; the next run continues "
                                      "from the checkpoint and does not re-read earlier records (remove the "
                                      "checkpoint too to re-ingest)"))
    return found


def _writer(pipeline: Pipeline, owner: str | None) -> list[Finding]:
    """The target written by another pipeline (`batch.commit.owner`): `run` refuses it."""
    if owner is None or owner == pipeline.name:
        return []
    return [Finding(WARNING, f"the target {shown_location(pipeline.target.location)} is written by pipeline "
                             f"{owner} (table property {OWNER}), not by {pipeline.name}: `ingest run` refuses "
                             "it. Two applications' patterns match its topic, or two topics render to it; "
                             "docs/many-topics.md says how to split them or hand the table over")]


def _checkpoint_vs_delta(pipeline: Pipeline, p: PartitionStatus, exists: bool,
                         kafka_up: bool) -> list[Finding]:
    where = f"{p.topic}/{p.partition}"
    if p.checkpoint is None or not exists:
        return []
    if p.delta_log is not None and p.checkpoint < p.delta_log:
        return [Finding(NOTE, f"{where}: the checkpoint ({p.checkpoint}) is behind the Delta log "
                              f"({p.delta_log}): a run stopped after its Delta commit and before Spark's "
                              "checkpoint commit; the next run replays that batch, and what of it reached "
                              "Delta is skipped by its txn id (a no-op replay)")]
    # A partition the log never recorded: compare from the first offset Kafka still has.
    recorded = p.delta_log if p.delta_log is not None else (p.earliest or 0)
    if p.checkpoint <= recorded or not kafka_up:
        return []
    first = kafka_admin.first_record_between(pipeline.source.kafka, p.topic, p.partition, recorded,
                                             p.checkpoint)
    if first is None:  # transaction markers and aborted records advance Spark's offsets only
        return []
    shown = "none" if p.delta_log is None else p.delta_log
    return [Finding(WARNING, f"{where}: the Delta log ({shown}) is behind the checkpoint ({p.checkpoint}) "
                             f"and offsets {first}-{p.checkpoint - 1} hold records: impossible unless the "
                             "table was altered (restored, recreated, or its log cleaned up); records may "
                             "be missing from it: run ingest verify")]


def _kafka_vs_next(pipeline: Pipeline, p: PartitionStatus) -> list[Finding]:
    where = f"{p.topic}/{p.partition}"
    if p.next_offset is None or p.earliest is None:
        return []
    if p.next_offset < p.earliest:
        outcome = ("skips them (allow_data_loss)" if pipeline.source.kafka.allow_data_loss
                   else "stops with an error unless source.kafka.allow_data_loss is true")
        return [Finding(WARNING, f"{where}: offsets {p.next_offset}-{p.earliest - 1} were deleted by "
                                 f"retention before they were ingested; the next run {outcome}")]
    if p.end is not None and p.next_offset > p.end:
        return [Finding(WARNING, f"{where}: Kafka's end offset ({p.end}) is behind where the next "
                                 f"run starts ({p.next_offset}): the topic was recreated, or the broker "
                                 "lost data")]
    return []
