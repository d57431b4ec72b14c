"""The micro-batch function: what foreachBatch calls for each batch.

`BatchProcessor.__call__` follows pipeline-spec.md's "What one micro-batch
does", top to bottom:

1-3. read, decode, transform and uid the Kafka rows (lazily), mark the one row
     per uid that reaches the MERGE, and cache that slim MERGE source (no raw
     key, value or headers). One aggregation over it reads Kafka once, fills
     the cache and gives the counts per stage, offsets per partition, unique
     uids and the MERGE bounds.
     Then the batch's position (`commit.position`): the range Spark planned,
     the topic ids and the txn id, and a batch id the target has already
     committed checked to be the same range; the target made if it is not
     yet, and checked to be this pipeline's to write (`commit.owner`); then
     the ranges retention lost (on_data_loss: record).
4.   the failed records, only when there are some, to the dead letters (read
     again from Kafka: nothing is kept for them in a batch without failures);
     then one MERGE from the cached source under the idempotent txn id with
     the offsets and counts in the commit, even when no row is left to merge
     (a MERGE Delta skipped checked to be the same range).
5.   Spark commits the batch in the checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingest.batch import lost_ranges, message_columns, message_key, schema_evolution, transform
from ingest.batch.bounds import merge_bounds
from ingest.batch.commit import faults, ledger
from ingest.batch.commit.conflicts import retry_conflicts
from ingest.batch.commit.owner import OwnerCheck
from ingest.batch.commit.position import BatchPosition, QueryPosition
from ingest.batch.commit.warm_state import StateWarmer
from ingest.batch.formats.cdc import decode_envelope
from ingest.batch.formats.decode import decode
from ingest.batch.merge import dead_letters
from ingest.batch.merge import mode as merge_mode
from ingest.batch.merge.target import MergeResult, target_schema
from ingest.batch.staged import KEEP, RAW, REASON, STAGE, TOMBSTONE, UNKNOWN_FIELDS
from ingest.batch.uid import mark_one_per_uid, with_uid
from ingest.kafka.offsets import Offsets
from ingest.platform.caching import kept, let_go
from ingest.platform.delta import table_exists
from ingest.platform.session import clone_with
from ingest.spec.columns import DELETE, OP, UID
from ingest.spec.model import Pipeline
from ingest.spec.variant_path import reference_sql

log = logging.getLogger("ingest.run")

STAGES = ("decode", "transform", "uid", "filtered")
PREPARE_JOB_GROUP = "ingest-background-prepare-target"
# What the MERGE, the ledger and the summary need of the raw record: its coordinates, not its bytes.
_COORDINATES = ("topic", "partition", "offset", "timestamp")


@dataclass(frozen=True)
class BatchSummary:
    """What one pass over the staged batch learns: counts, offsets, MERGE bounds."""

    read: int
    unique: int  # distinct uids among the records that reach the MERGE
    by_stage: dict[str, int]
    start_offsets: Offsets
    end_offsets: Offsets  # next offset to read, per partition
    bounds: dict[str, str]
    deletes: int = 0  # good records that delete their key, where a delete log keeps them (else 0)
    # source.unknown_fields: warn: records with fields the schema does not name, and one's names
    unknown_fields: int = 0
    unknown_example: str | None = None

    @property
    def dead_letters(self) -> int:
        return sum(self.by_stage.get(s, 0) for s in dead_letters.FAILURE_STAGES)

    @property
    def counts(self) -> dict[str, int]:
        """What the batch's commits record in their ledger entry."""
        return {"read": self.read, "unique": self.unique, **self.by_stage}

    @property
    def good(self) -> int:
        return self.read - self.dead_letters - self.by_stage.get("filtered", 0)


@dataclass(frozen=True)
class BatchReport:
    pipeline: str
    batch_id: int
    summary: BatchSummary
    merged: MergeResult
    seconds: float
    dead_letters_at: str | None = None  # where the run's reader finds them (set by the stream layer)

    def line(self) -> str:
        s, m = self.summary, self.merged
        unchanged = unchanged_count(s, m)
        stages = ", ".join(f"{k} {s.by_stage.get(k, 0)}" for k in dead_letters.FAILURE_STAGES)
        offsets = " ".join(f"{t}/{p}:{s.start_offsets[t][p]}-{end}"
                           for t, parts in sorted(s.end_offsets.items()) for p, end in sorted(parts.items()))
        return (f"{self.pipeline} batch {self.batch_id}: read {s.read}, merged {s.unique} "
                f"(inserted {m.inserted}, updated {m.updated}, deleted {m.deleted}, "
                f"unchanged {unchanged}), "
                f"dead letters {s.dead_letters} ({stages}){_in(self.dead_letters_at, s.dead_letters)}, "
                f"filtered {s.by_stage.get('filtered', 0)}, "
                f"{self.seconds:.1f}s, offsets {offsets}{_unknown_note(s)}")


def _in(location: str | None, dead_letters: int) -> str:
    return f" in {location}" if location and dead_letters else ""


def _unknown_note(s: BatchSummary) -> str:
    if not s.unknown_fields:
        return ""
    return (f"; {s.unknown_fields} record(s) with fields the schema does not name (e.g. "
            f"{s.unknown_example}), merged without them (source.unknown_fields: warn)")


def unchanged_count(s: BatchSummary, m: MergeResult) -> int:
    """The batch's records that changed no row (already there, or older than the row). History's
    MERGE also updates the versions a new one ends, so its writes can outnumber the records:
    never below zero."""
    return max(0, s.unique - m.inserted - m.updated - m.deleted)


@dataclass
class BatchProcessor:
    pipeline: Pipeline
    schema: StructType | None
    on_report: Callable[[BatchReport], None] = lambda report: log.info(report.line())
    # False only to measure what the bounds save (bench/); the result is as exact, only slower.
    bounded: bool = True
    # the table among a pipeline's per-topic tables (`batch.routing`), part of its txn app id
    table_key: str | None = None
    # (batch id, end offsets if known, error) of the batch that failed, for the run's message
    failure: tuple | None = None
    position: QueryPosition = field(init=False)  # where the query is, kept from batch to batch
    owner: OwnerCheck = field(init=False)  # the target is this pipeline's to write
    _target_ready: bool = False
    _batch_offsets: dict | None = None
    _accepted_columns: StructType | None = None  # the batch columns last checked against the target
    _warmer: StateWarmer | None = None  # the target's next state, computed beside the next batch
    _preparing: threading.Thread | None = None  # the target made while the query starts
    _from_messages: message_columns.RowFromMessages | None = None  # the columns from the messages

    def __post_init__(self) -> None:
        self.position = QueryPosition(self.pipeline, self.table_key)
        self.owner = OwnerCheck(self.pipeline.name, self.pipeline.target)
        if self.pipeline.columns_from_messages:
            self._from_messages = message_columns.RowFromMessages(self.pipeline)

    def __getstate__(self) -> dict:
        """On Spark Connect foreachBatch pickles the processor to a worker beside the server:
        threads and what they hold (a session, a JVM's table state) stay here, the worker
        makes its own."""
        return {**self.__dict__, "_preparing": None, "_warmer": None}

    def prepare(self, spark, batch_schema: StructType) -> None:
        """While the query starts: make the target's tables with the columns a batch of
        `batch_schema` gives them (analysis of an empty batch; no job) and compute their
        state, on a thread the first batch joins before it reads the target. The tables
        are made outside any txn id, as the first batch makes them; if this fails, the
        first batch makes them itself."""
        session = clone_with(spark, self.pipeline.spark_conf)
        if session is None or self.pipeline.columns_from_messages:  # the columns come with the data
            return
        from pyspark import InheritableThread

        self._preparing = InheritableThread(target=self._prepare_target, args=(session, batch_schema),
                                            name="ingest-prepare-target", daemon=True)
        self._preparing.start()

    def settle(self) -> None:
        """Once the query has ended: the work started beside the batches (the target's
        making, its state, a checkpoint) finished, so a run does not end in the middle of it."""
        if self._preparing is not None:
            self._preparing.join()
        if self._warmer is not None:
            self._warmer.settle()

    def _prepare_target(self, session, batch_schema: StructType) -> None:
        try:
            session.sparkContext.setJobGroup(PREPARE_JOB_GROUP, "ingest: the target, made while the query starts",
                                             interruptOnCancel=False)
            staged = self._transform_and_uid(self._decode(session.createDataFrame([], batch_schema)), failed=())
            rows = merge_mode.batch_rows(self._merge_source(staged).where(F.col(STAGE).isNull()), self.pipeline)
            self._ready_target(session, rows)
        except Exception as error:  # the first batch makes the tables then
            log.debug("%s: making the target while the query starts failed: %s", self.pipeline.name, error)

    def _ready_target(self, session, rows: DataFrame) -> None:
        merge_mode.create_tables(session, self.pipeline, rows)
        self._warmer = StateWarmer(session, self.pipeline.target)
        self._warmer.start()
        self._target_ready = True

    def __call__(self, batch_df: DataFrame, batch_id: int, envelopes: dict | None = None) -> None:
        """`envelopes`: the batch's envelope schemas per topic where the caller has listed
        them (`batch.routing`, once for every table); else listed here when needed."""
        self._batch_offsets = None
        try:
            self._process(batch_df, batch_id, envelopes)
        except Exception as error:
            self.failure = (batch_id, self._batch_offsets, error)
            raise

    def _process(self, batch_df: DataFrame, batch_id: int, envelopes: dict | None = None) -> None:
        """pipeline-spec.md's steps, each once; the exactly-once argument is `position`'s."""
        started = time.monotonic()
        session = batch_df.sparkSession
        with ExitStack() as cached:  # whatever a step persists is released when the batch ends
            if self._from_messages is not None:
                if envelopes is None:  # listed here, then decoded: Kafka read once for both
                    batch_df = kept(batch_df, cached)
                    envelopes = message_columns.envelope_schemas(batch_df)
                self.schema = self._from_messages.row(session, batch_df, envelopes)
                if self.schema is None:  # no record, no table: nothing to make the table of yet
                    log.info("%s batch %d: no record and no table yet; nothing to write", self.pipeline.name,
                             batch_id)
                    return
                # the key columns (cdc.key, or the message keys' schemas): the uid of every row
                self.pipeline = self._from_messages.keyed(session, self.pipeline, envelopes, self.schema)
            staged, source, summary = self._stage(batch_df, cached)  # 1-3, one pass over Kafka
            self._target_made()
            self._batch_offsets = summary.end_offsets
            position = self.position.batch(session, batch_id, summary)
            position.check_replay(session)  # before anything of the batch is written
            rows = self._rows(session, source)
            self._claim_target(session, rows)  # this pipeline's table, or nothing is written
            self._record_lost(session, position, summary)
            self._write_dead_letters(staged, summary, position)
            merged = self._merge(session, rows, summary, position)  # 4
            position.check_skipped(session, merged.skipped)
            self.on_report(BatchReport(self.pipeline.name, batch_id, summary, merged,
                                       time.monotonic() - started))

    def _target_made(self) -> None:
        if self._preparing is not None:  # nothing of the batch has read the target yet
            self._preparing.join()
            self._preparing = None

    def _stage(self, batch_df: DataFrame, cached: ExitStack) -> tuple[DataFrame, DataFrame, BatchSummary]:
        """The staged records (lazy, raw evidence and all: read again only for dead
        letters), the cached MERGE source, and the summary whose aggregation filled it."""
        decoded = self._decode(batch_df)
        staged = self._transform_and_uid(decoded, failed=())
        source = kept(self._merge_source(staged), cached)
        try:
            return staged, source, summarize(source, self.pipeline)
        except Exception as error:  # only a record's data error is handled here
            if self.pipeline.transform is None or not transform.is_record_error(error):
                raise
        # ANSI SQL failed the whole pass on some record: search for it in the decoded
        # records, kept now since the search reads them many times.
        let_go(source)
        decoded = kept(decoded, cached)
        failed = transform.find_failing(decoded, self.pipeline.transform)
        log.warning("%s: %d record(s) failed the transform; sent to the dead letters",
                    self.pipeline.name, len(failed))
        staged = self._transform_and_uid(decoded, failed)
        source = kept(self._merge_source(staged), cached)
        return staged, source, summarize(source, self.pipeline)

    def _decode(self, batch_df: DataFrame) -> DataFrame:
        if self.pipeline.cdc is not None:  # change envelopes: the row, its op and sequence
            return decode_envelope(batch_df, self.pipeline.cdc, self.schema, self.pipeline.columns_from_messages)
        return decode_records(batch_df, self.pipeline, self.schema)

    def _transform_and_uid(self, decoded: DataFrame, failed) -> DataFrame:
        return staged_records(decoded, self.pipeline, failed)

    def _merge_source(self, staged: DataFrame) -> DataFrame:
        """Every record with its uid, stage, payload and coordinates (not its raw bytes),
        KEEP marking the rows the MERGE takes."""
        return mark_kept(slim(staged), self.pipeline)

    def _rows(self, session, source: DataFrame) -> DataFrame:
        """The MERGE's rows, their columns checked against the target's before anything of the
        batch is written."""
        rows = merge_mode.batch_rows(source.where(F.col(STAGE).isNull()), self.pipeline)
        self._check_schema(session, rows.schema)
        return rows

    def _check_schema(self, session, columns: StructType) -> None:
        if columns == self._accepted_columns or not table_exists(session, self.pipeline.target):
            return
        schema_evolution.check(target_schema(session, self.pipeline.target), columns,
                               self.pipeline.schema_evolution, self.pipeline.target.location)
        self._accepted_columns = columns

    def _record_lost(self, session, position: BatchPosition, summary: BatchSummary) -> None:
        """The ranges retention deleted before the batch read them (on_data_loss: record).
        Written before the batch's own commits, each under its own txn id: a replay
        after a crash finds the same ranges and adds nothing."""
        if position.start is None or not self.pipeline.records_data_loss:
            return
        gaps = lost_ranges.skipped_ranges(self.pipeline, position.start, position.end, summary.start_offsets)
        for gap in gaps:
            log.warning("%s batch %d: %s while the query ran (on_data_loss: record); recorded in %s "
                        "with stage lost", self.pipeline.name, position.batch_id, gap.describe(),
                        self.pipeline.dead_letter.location)
        if gaps:
            lost_ranges.record_lost(session, self.pipeline, gaps)

    def _write_dead_letters(self, staged, summary: BatchSummary, position: BatchPosition) -> None:
        batch_id = position.batch_id
        faults.point("before_dead_letter", batch_id)
        if summary.dead_letters:
            rows = dead_letters.dead_letters(staged, self.pipeline.name, batch_id, position.topic_ids)
            retry_conflicts(lambda: dead_letters.write(rows, self.pipeline.dead_letter, position.txn),
                            f"{self.pipeline.name} batch {batch_id}: dead letters to "
                            f"{self.pipeline.dead_letter.location}")
        faults.point("after_dead_letter", batch_id)

    def _claim_target(self, session, rows: DataFrame) -> None:
        """The target made if it is not yet (naming this pipeline), then checked to be its."""
        if not self._target_ready:
            self._ready_target(session, rows)
        self.owner.check(session)

    def _merge(self, session, rows: DataFrame, summary: BatchSummary, position: BatchPosition) -> MergeResult:
        batch_id = position.batch_id
        assert self._warmer is not None
        self._warmer.join()
        # Even with no rows: the commit Delta makes for it (a SetTransaction and the
        # ledger entry, no files) is the batch's record in the target's log, the one
        # log recovery reads.
        def attempt() -> MergeResult:
            with ledger.txn_settings(session, position.txn), faults.during("during_merge", batch_id):
                return merge_mode.merge(session, rows, self.pipeline, summary.bounds if self.bounded else {},
                                        logs_deletes=summary.deletes > 0)

        merged = retry_conflicts(self.owner.rechecked(session, attempt),  # the owner checked again on a retry
                                 f"{self.pipeline.name} batch {batch_id}: MERGE into {self.pipeline.target.location}")
        faults.point("after_target_commit", batch_id)
        self._warmer.start()
        return merged


def slim(staged: DataFrame) -> DataFrame:
    """The staged records without the raw key, value and headers, which only a dead
    letter needs (and reads again from the batch)."""
    payload = [F.col(f"`{c}`") for c in staged.columns if c not in (RAW, UID, STAGE, REASON)]
    kept = _COORDINATES + ((UNKNOWN_FIELDS,) if _carries_unknown(staged) else ())
    return staged.select(UID, STAGE, *payload,
                         F.struct(*[F.col(f"{RAW}.{c}").alias(c) for c in kept]).alias(RAW))


def _carries_unknown(frame: DataFrame) -> bool:
    """RAW carries the unknown fields' names (`source.unknown_fields: warn`)."""
    return UNKNOWN_FIELDS in frame.select(f"{RAW}.*").columns


def mark_kept(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """KEEP on the row per uid an insert_only or upsert MERGE takes. Changes (cdc,
    history) rank their own rows; for them KEEP marks one row per uid, what the
    count of unique uids needs; cdc's changes are marked by the MERGE's own rank."""
    changes = merge_mode.mark_changes(records, pipeline)
    if changes is not None:
        return changes
    if (pipeline.target.mode == "upsert" and pipeline.target.order_by and not merge_mode.applies_changes(pipeline)
            and not pipeline.deletes_by_tombstone):
        return mark_one_per_uid(records, "upsert", pipeline.target.order_by)
    return mark_one_per_uid(records, "insert_only", None)


def summarize(source: DataFrame, pipeline: Pipeline) -> BatchSummary:
    """Counts per stage, offsets, unique uids and MERGE bounds, in one aggregation per
    Kafka partition over the MERGE source (KEEP marking the merged rows; a staged frame
    without KEEP is marked here as the processor marks it)."""
    if KEEP not in source.columns:
        source = mark_kept(source, pipeline)
    kept = F.col(KEEP)
    aggregates = [F.count(F.lit(1)).alias("read"),
                  F.min(f"{RAW}.offset").alias("first"), F.max(f"{RAW}.offset").alias("last"),
                  F.sum(kept.cast("long")).alias("unique"),
                  F.min(F.when(kept, F.col(UID))).alias("uid_min"),
                  F.max(F.when(kept, F.col(UID))).alias("uid_max")]
    aggregates += [F.sum(F.when(F.col(STAGE) == s, 1).otherwise(0)).alias(s) for s in STAGES]
    if pipeline.keeps_delete_log:
        deleting = F.col(TOMBSTONE) if pipeline.deletes_by_tombstone else F.col(OP) == DELETE
        aggregates.append(F.sum(F.when(F.col(STAGE).isNull() & deleting, 1).otherwise(0)).alias("deletes"))
    counts_unknown = _carries_unknown(source)
    if counts_unknown:
        unknown = F.col(f"{RAW}.{UNKNOWN_FIELDS}")
        aggregates += [F.count(unknown).alias("unknown_fields"),
                       F.first(unknown, ignorenulls=True).alias("unknown_example")]
    horizon = pipeline.target.dedup_horizon
    if horizon:
        # Epoch microseconds, never local text: a wall clock in a daylight-saving
        # fall-back hour names two instants, and parsing it back picks the first.
        # Every good record counts, not only the kept ones: the MERGE of changes
        # takes other rows of a uid than KEEP marks.
        good = F.col(STAGE).isNull()
        micros, within = F.unix_micros(F.expr(reference_sql(horizon.column))), horizon.within_seconds * 1_000_000
        aggregates += [
            (F.min(F.when(good, micros)) - within).alias("lo"),
            (F.max(F.when(good, micros)) + within).alias("hi"),
            F.sum(F.when(good & micros.isNull(), 1).otherwise(0)).alias("null_horizon"),
        ]
    per_partition = source.groupBy(F.col(f"{RAW}.topic").alias("topic"),
                                   F.col(f"{RAW}.partition").alias("partition")).agg(*aggregates).collect()
    return _summary(per_partition, horizon is not None, pipeline.keeps_delete_log, counts_unknown)


def _summary(rows, with_horizon: bool, with_deletes: bool = False, counts_unknown: bool = False) -> BatchSummary:
    start: dict = {}
    end: dict = {}
    by_stage = {s: 0 for s in STAGES}
    for row in rows:
        start.setdefault(row.topic, {})[row.partition] = row.first
        end.setdefault(row.topic, {})[row.partition] = row.last + 1
        for s in STAGES:
            by_stage[s] += row[s]
    return BatchSummary(read=sum(r.read for r in rows), unique=sum(r.unique for r in rows),
                        by_stage=by_stage, start_offsets=start, end_offsets=end,
                        bounds=merge_bounds(rows, with_horizon),
                        deletes=sum(r.deletes for r in rows) if with_deletes else 0,
                        unknown_fields=sum(r.unknown_fields for r in rows) if counts_unknown else 0,
                        unknown_example=next((r.unknown_example for r in rows if r.unknown_example), None)
                        if counts_unknown else None)


def decode_records(raw: DataFrame, pipeline: Pipeline, schema) -> DataFrame:
    """Decoded records (without `cdc`); in an upsert by Kafka key, tombstones marked as deletes."""
    decoded = decode(raw, pipeline.source.format, schema, pipeline.source.unknown_fields)
    if not pipeline.deletes_by_tombstone:
        return decoded
    from ingest.batch.merge.tombstones import mark

    return mark(decoded)


def staged_records(decoded: DataFrame, pipeline: Pipeline, failed=()) -> DataFrame:
    """Transformed records with their uid; what the batch and `verify` both stage."""
    if pipeline.key_from_messages:  # no uid before a batch has named the key (`message_key`)
        raise message_key.NoKey(f"{pipeline.name}: the key columns are not known yet; expected them "
                                "from the message key's schema (message_key.KeyFromMessages.keyed)")
    if not pipeline.deletes_by_tombstone:
        return with_uid(transform.apply(decoded, pipeline.transform, failed), pipeline.uid,
                        upsert_order(pipeline))

    # a tombstone has no payload to transform or filter: it passes around the transform
    tombstones = decoded.where(F.col(TOMBSTONE)).select(RAW, STAGE, REASON, TOMBSTONE)
    versions = transform.apply(decoded.where(~F.col(TOMBSTONE)).drop(TOMBSTONE), pipeline.transform,
                               failed).withColumn(TOMBSTONE, F.lit(False))
    return with_uid(versions.unionByName(tombstones, allowMissingColumns=True), pipeline.uid,
                    upsert_order(pipeline), unordered_ok=TOMBSTONE)


def upsert_order(pipeline: Pipeline) -> str | None:
    """The column whose null makes an upsert record a dead letter (None for insert_only)."""
    return pipeline.target.order_by if pipeline.target.mode == "upsert" else None


def payload_schema(spark, pipeline: Pipeline):
    """json: the DDL as a StructType (`schema: variant`: a `VariantDecoder`; None where the columns
    come from the messages); avro, protobuf: the run's `SchemaDecoder` (asks the registry now)."""
    if pipeline.source.format in ("avro", "protobuf"):
        from ingest.batch.formats.schemas import SchemaDecoder

        decoder = SchemaDecoder.open(pipeline.source)
        if pipeline.cdc is not None:  # the reader schema must be a change envelope
            from ingest.batch.formats.cdc import envelope_row

            envelope_row(decoder.columns)
        return decoder
    if pipeline.source.format != "json" or pipeline.columns_from_messages:
        return None
    if pipeline.source.variant:
        from ingest.batch.formats.variant import VariantDecoder

        return VariantDecoder()
    return spark.createDataFrame([], pipeline.source.schema).schema
