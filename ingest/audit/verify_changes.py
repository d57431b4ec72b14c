"""`ingest verify` for change data capture: the table equals the topic's changes applied in order.

The topic is read as one batch through the pipeline's own envelope, transform and
uid steps. What is audited is what the record audit audits (`scope.audit_scope`):
per partition, from the pipeline's start (an offsets map, or for `latest` its first
start) up to the end offsets recorded in the target's Delta log, or further where
the checkpoint or the dead-letter ledger says more was consumed; later changes are
not yet ingested.

Every audited record ends in one place: a change applied to the table, a dead
letter (a change that cannot be applied, by topic/partition/offset), or filtered
(Debezium's tombstone after a delete, `transform.where`). For every key an audited
change reaches, its last change by (`_sequence`, partition, offset) says what the
table must hold: one row with that change's columns and sequence, or the key
deleted (soft: `_deleted` with the delete's sequence; hard: no row; history: the
key's last version is that delete). Rows of keys no audited change reaches are not
judged: their changes are before the start, or gone from the topic (retention, or
the log cleaner after a delete's tombstone).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from ingest.audit.scope import audit_scope, outside_ledger
from ingest.audit.verify import (
    COORDINATES,
    Unaccounted,
    copies,
    copy_counts,
    current_topic_ids,
    dead_letters,
    persisted,
    read_topic,
)
from ingest.batch import message_columns, message_key, transform
from ingest.batch.formats.cdc import decode_envelope
from ingest.batch.merge.changes import last_changes
from ingest.batch.merge.dead_letters import FAILURE_STAGES
from ingest.batch.processor import payload_schema, staged_records
from ingest.batch.staged import RAW, REASON, STAGE
from ingest.kafka import admin as kafka_admin
from ingest.platform.delta import table_exists
from ingest.spec.columns import DELETE, OP, SEQUENCE, UID
from ingest.spec.model import Pipeline

EXAMPLES = 5
APPLIED, DEAD_LETTER, FILTERED, UNACCOUNTED = "applied", "dead_letter", "filtered", "unaccounted"
AT = [f"__{c}" for c in COORDINATES]  # a record's coordinates beside the row's own columns


@dataclass(frozen=True)
class KeyDifference:
    uid: str
    expected: str
    found: str


@dataclass(frozen=True)
class ChangesReport:
    pipeline: str
    changes: int  # audited changes applied (good envelopes in the audited offsets)
    keys: int  # distinct keys among them
    live: int  # keys whose last change is not a delete
    deleted: int  # keys whose last change is a delete
    differing: int  # keys whose rows are not their last change (other values, or more than one row)
    examples: tuple[KeyDifference, ...] = ()
    topic_records: int = 0  # every record read from the topic (read_committed)
    before_start: int = 0  # before the pipeline's starting offsets: not audited
    not_yet_ingested: int = 0  # after the end offsets in the Delta log: not audited
    dead_letters: int = 0  # rows of this pipeline in the dead-letter table
    failed: int = 0  # audited records that cannot be applied (dead letters expected)
    filtered: int = 0  # audited tombstones and records transform.where drops
    unaccounted: int = 0  # failed records not in the dead letters, or good ones that are
    unaccounted_examples: tuple[Unaccounted, ...] = ()
    notes: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.differing or self.unaccounted or self.findings)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def verify_changes(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None) -> ChangesReport:
    """`only_topics`: one table of a pipeline with a table per topic, whose dead-letter
    table may be shared."""
    ids = current_topic_ids(pipeline, kafka_admin.check_reachable(pipeline.source.kafka))
    exists = table_exists(spark, pipeline.target)
    scope, notes, beyond = audit_scope(spark, pipeline, exists, only_topics, ids)
    with ExitStack() as held:  # the dead letters and the topic read once, as in `verify`
        dead = persisted(held, copies(dead_letters(spark, pipeline, only_topics, ids), COORDINATES))
        raw = persisted(held, read_topic(spark, pipeline))
        findings = outside_ledger(pipeline, raw, beyond, exists)
        envelopes = message_columns.envelope_schemas(raw) if pipeline.columns_from_messages else {}
        row = _row(spark, pipeline, envelopes)
        if pipeline.columns_from_messages:  # the key the batches took: cdc.key, or the message keys'
            pipeline = message_columns.RowFromMessages(pipeline).keyed(spark, pipeline, envelopes, row)
        records, counts = _records(spark, pipeline, raw, dead, scope, row)
        held.callback(records.unpersist)
        expected = _expected(records.where(F.col("__fate") == APPLIED))
        found = _found(spark, pipeline, expected.columns) if exists else None
        report = _compare(pipeline, counts["changes"], expected, found)
        return _accounted(report, counts, records, dead, pipeline, notes, findings)


# --- each record's fate -----------------------------------------------------------------


def _row(spark, pipeline: Pipeline, envelopes: dict):
    """The row's columns the batches decoded with: declared, or from the topic's messages and
    the table (`envelopes`: the topic's schemas, `message_columns.envelope_schemas`). Neither a
    table nor a message with a schema: the key alone (each record is then judged as the batch
    would, a dead letter without a schema)."""
    if not pipeline.columns_from_messages:
        return payload_schema(spark, pipeline)
    try:
        row = message_columns.columns_of(spark, pipeline, envelopes)
    except message_columns.NoRowSchema:
        row = None
    key = pipeline.cdc.key or next((names for texts in envelopes.values() for text in texts.key_schemas
                                    if (names := message_key.key_names(text))), ())
    return row or StructType([StructField(name, StringType()) for name in key])


def _records(spark, pipeline: Pipeline, raw: DataFrame, dead: DataFrame, scope: DataFrame,
             row) -> tuple[DataFrame, dict[str, int]]:
    """Every record of the topic, staged as the batch stages it, with its `fate`;
    persisted, by the pass that counts them (`_record_counts`). A transform that raises
    on a record makes that record a transform failure, as in the batch."""
    decoded = decode_envelope(raw, pipeline.cdc, row, pipeline.columns_from_messages)
    records = _judge(staged_records(decoded, pipeline), dead, scope, pipeline).persist()
    try:
        return records, _record_counts(records)
    except Exception as error:
        records.unpersist()
        if pipeline.transform is None or not transform.is_record_error(error):
            raise
    failed = transform.find_failing(decoded, pipeline.transform)
    records = _judge(staged_records(decoded, pipeline, failed), dead, scope, pipeline).persist()
    return records, _record_counts(records)


def _record_counts(records: DataFrame) -> dict[str, int]:
    """The records by fate, in one pass."""
    fate = F.col("__fate")

    def how_many(value: str) -> Column:
        return F.sum(F.when(fate == value, 1).otherwise(0))

    row = records.agg(
        F.count(F.lit(1)).alias("topic_records"), how_many("before_start").alias("before_start"),
        how_many("not_yet_ingested").alias("not_yet_ingested"), how_many(FILTERED).alias("filtered"),
        how_many(UNACCOUNTED).alias("unaccounted"), how_many(APPLIED).alias("changes"),
        F.sum(F.when(F.col(STAGE).isin(*FAILURE_STAGES) & fate.isin(DEAD_LETTER, UNACCOUNTED), 1)
              .otherwise(0)).alias("failed"),
        F.sum(F.when((fate == DEAD_LETTER) & F.col("__well_formed"), 1).otherwise(0)).alias("well_formed"),
    ).first()
    return {key: int(value or 0) for key, value in row.asDict().items()}


def _judge(staged: DataFrame, dead: DataFrame, scope: DataFrame, pipeline: Pipeline) -> DataFrame:
    """`staged` with `__fate`, `__why`, `__well_formed` and the coordinates as `AT`:
    names no row column can take. `dead`: the dead letters' `copies` by coordinates."""
    dead_here = dead.select(*[F.col(c).alias(f"__{c}") for c in COORDINATES]).withColumn("__in_dead", F.lit(True))
    scope = scope.select(*[F.col(c).alias(f"__{c}") for c in scope.columns])
    records = staged.select("*", *[F.col(f"{RAW}.{c}").alias(f"__{c}") for c in COORDINATES])
    joined = (records.join(F.broadcast(scope), ["__topic", "__partition"], "left")
              .join(dead_here, AT, "left"))
    stage, offset, in_dead = F.col(STAGE), F.col("__offset"), F.col("__in_dead").isNotNull()
    fate = (F.when(offset < F.coalesce(F.col("__start"), F.lit(0)), F.lit("before_start"))
            .when(F.col("__end").isNull() | (offset >= F.col("__end")), F.lit("not_yet_ingested"))
            .when(stage.isin(*FAILURE_STAGES) & in_dead, F.lit(DEAD_LETTER))
            .when(in_dead | stage.isin(*FAILURE_STAGES), F.lit(UNACCOUNTED))
            .when(stage == "filtered", F.lit(FILTERED))
            .otherwise(F.lit(APPLIED)))
    why = (F.when(in_dead, F.format_string("a %s record is in the dead letters", F.coalesce(stage, F.lit("good"))))
           .otherwise(F.format_string("a %s failure (%s) that is not in the dead letters",
                                      stage, F.coalesce(F.col(REASON), F.lit("no reason")))))
    return joined.select("*", fate.alias("__fate"), why.alias("__why"),
                         _well_formed(pipeline.source.format).alias("__well_formed")
                         ).drop("__start", "__end", "__in_dead")


def _well_formed(source_format: str) -> Column:
    """The value is a JSON object, or a schema-registry message (magic byte, schema id):
    a change in it that cannot be applied is a misfit of the settings, not of the data."""
    value = F.col(f"{RAW}.value")
    if source_format == "json":
        return F.from_json(value.cast("string"), "map<string,string>").isNotNull()
    return (F.length(value) > 5) & (F.substring(value, 1, 1) == F.lit(bytes([0])))


# --- the table ---------------------------------------------------------------------------


def _row_columns(frame: DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith("__") and c not in (UID, SEQUENCE, OP)]


def _expected(changes: DataFrame) -> DataFrame:
    last = last_changes(changes)
    columns = [c for c in _row_columns(changes) if c not in (RAW, STAGE, REASON)]
    return last.select(UID, *[F.col(f"`{c}`") for c in columns], SEQUENCE,
                       (F.col(OP) == DELETE).alias("__deleted"))


def _found(spark, pipeline: Pipeline, columns: list[str]) -> DataFrame:
    """One row per key with `__rows`, how many rows the key has (its current version
    with history): more than one is a finding whatever they hold."""
    target = pipeline.target
    rows = spark.read.table(target.table) if target.table else spark.read.format("delta").load(target.path)
    if target.history:  # the key's last version: current, or the delete that ended it
        rows = rows.where(F.col("_valid_to").isNull())
    deleted = F.col("_deleted") if "_deleted" in rows.columns else F.lit(False)
    per_key = Window.partitionBy(UID)
    return (rows.select(*[F.col(f"`{c}`") for c in columns if c != "__deleted"], deleted.alias("__deleted"),
                        F.count(F.lit(1)).over(per_key).alias("__rows"))
            .dropDuplicates([UID]))


def _state(frame: str, columns: list[str]) -> Column:
    """A key's state as text: 'deleted at S', 'absent', or the row and its sequence."""
    row = F.to_json(F.struct(*[F.col(f"{frame}.`{c}`") for c in columns]))
    return (F.when(F.col(f"{frame}.{UID}").isNull(), F.lit("absent"))
            .when(F.col(f"{frame}.__deleted"), F.format_string("deleted at %s", F.col(f"{frame}.{SEQUENCE}")))
            .otherwise(F.format_string("%s at %s", row, F.col(f"{frame}.{SEQUENCE}"))))


def _compare(pipeline: Pipeline, changes: int, expected: DataFrame, found: DataFrame | None) -> ChangesReport:
    """`changes`: how many audited changes were applied; one pass judges every key."""
    columns = [c for c in _row_columns(expected) if c != "__deleted"]
    if found is None:
        found = expected.where(F.lit(False)).withColumn("__rows", F.lit(0).cast("long"))
    hard = pipeline.target.deletes == "hard" and not pipeline.target.history
    # from the expected side only: a row of a key no audited change reaches is not judged
    joined = expected.alias("e").join(found.alias("f"), F.col(f"e.{UID}") == F.col(f"f.{UID}"), "left")
    want, have = _state("e", columns), _state("f", columns)
    have = F.when(F.col("f.__rows") > 1, F.format_string("%d rows", F.col("f.__rows"))).otherwise(have)
    if hard:  # a hard-deleted key has no row
        want = F.when(F.col("e.__deleted"), F.lit("absent")).otherwise(want)
    judged = joined.select(F.col(f"e.{UID}").alias("uid"), want.alias("expected"), have.alias("found"),
                           F.col("e.__deleted").alias("__deleted"))
    differs = F.col("expected") != F.col("found")  # one row per expected key: the found side has one per key
    counts = judged.agg(F.count(F.lit(1)).alias("keys"), F.sum(F.col("__deleted").cast("int")).alias("deleted"),
                        F.sum(F.when(differs, 1).otherwise(0)).alias("differing")).first()
    differing = int(counts.differing or 0)
    examples = tuple(KeyDifference(r.uid, r.expected, r.found)
                     for r in judged.where(differs).orderBy("uid").limit(EXAMPLES).collect()) if differing else ()
    return ChangesReport(pipeline.name, changes=changes, keys=counts.keys,
                         live=counts.keys - (counts.deleted or 0), deleted=counts.deleted or 0,
                         differing=differing, examples=examples)


# --- the dead letters ---------------------------------------------------------------------


def _accounted(report: ChangesReport, counts: dict[str, Any], records: DataFrame, dead: DataFrame,
               pipeline: Pipeline, notes: tuple[str, ...], findings: list[str]) -> ChangesReport:
    """`counts`: `_record_counts`; `dead`: the dead letters' `copies` by coordinates."""
    shown = (records.where(F.col("__fate") == UNACCOUNTED).orderBy(*AT).limit(EXAMPLES).collect()
             if counts["unaccounted"] else [])
    if counts["failed"] and not report.changes and counts["well_formed"]:
        findings = [*findings, f"every audited change ({counts['failed']}) is in the dead letters, "
                    f"{counts['well_formed']} of them well-formed {pipeline.source.format} values: the "
                    "pipeline's cdc or schema settings do not fit the topic (see the dead letters' reasons)"]
    return replace(
        report, topic_records=counts["topic_records"], before_start=counts["before_start"],
        not_yet_ingested=counts["not_yet_ingested"], dead_letters=copy_counts(dead)[0], failed=counts["failed"],
        filtered=counts["filtered"], unaccounted=counts["unaccounted"],
        unaccounted_examples=tuple(Unaccounted(r["__topic"], r["__partition"], r["__offset"], r["__why"])
                                   for r in shown),
        notes=notes, findings=tuple(findings))
