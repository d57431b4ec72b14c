"""`ingest verify`: audit the target and the dead letters against the topic, with no
help from Spark's checkpoint.

Every record of the topic must end in exactly one place (pipeline-spec.md): the
target (by its uid: a second copy of a uid is accounted by the first), the dead
letters (by topic/partition/offset), or the `transform.where` filter. The topic is
read as one batch (read_committed), each record's uid is computed by the pipeline's
own decode, transform and uid functions, and the rest is Spark joins: nothing loops
over records on the driver.

What is audited, per partition, is what the pipeline has consumed: offsets from its
start (the spec's starting_offsets map, or for `latest` the first start the ledger
carries across checkpoints) up to the end offset recorded in the target's Delta
log, or further where the checkpoint or the dead-letter ledger says more was
consumed (a finding). Later records are "not yet ingested", so verify can run
while a pipeline lags. Beyond the counts, target rows are checked against the
records that put them there (coordinates and values; with upsert, the latest
version).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ingest.audit.scope import audit_scope, outside_ledger
from ingest.audit.verify_report import DeadLetterCopies, Duplicate, Missing, Unaccounted, VerifyReport
from ingest.batch import transform
from ingest.batch.formats.decode import decode
from ingest.batch.merge.dead_letters import FAILURE_STAGES, TOPIC_ID
from ingest.batch.processor import decode_records, payload_schema, staged_records, upsert_order
from ingest.batch.staged import RAW, REASON, STAGE, TOMBSTONE
from ingest.batch.uid import with_uid
from ingest.kafka import admin as kafka_admin
from ingest.kafka.source import kafka_options
from ingest.platform import delta
from ingest.platform.caching import required
from ingest.spec.columns import UID
from ingest.spec.model import Pipeline
from ingest.spec.sql_check import changing_columns
from ingest.spec.variant_path import reference_sql

EXAMPLES = 5
COORDINATES = ["topic", "partition", "offset"]
# Where a record of the topic went; `unaccounted` is the finding.
IN_TARGET, DEAD_LETTER, FILTERED, UNACCOUNTED = "target", "dead_letter", "filtered", "unaccounted"
BEFORE_START, NOT_YET_INGESTED = "before_start", "not_yet_ingested"


def verify(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None) -> VerifyReport:
    """Audit `pipeline`'s target and dead letters against its topic. `only_topics`: one
    table of a pipeline with a table per topic, whose dead-letter table may be shared."""
    # Spark's Kafka client retries refused credentials for minutes: ask first, fail fast.
    subscribed = kafka_admin.check_reachable(pipeline.source.kafka)
    ids = current_topic_ids(pipeline, subscribed)
    table = _read_delta(spark, pipeline.target)
    scope, notes, beyond = audit_scope(spark, pipeline, table is not None, only_topics, ids)
    schema = payload_schema(spark, pipeline)
    # Each table and the topic is read once: every count and finding below reads these
    # caches, and each read of a Delta table would list its files again.
    with ExitStack() as held:
        dead = persisted(held, copies(dead_letters(spark, pipeline, only_topics, ids), COORDINATES))
        raw = persisted(held, read_topic(spark, pipeline))
        findings = outside_ledger(pipeline, raw, beyond, table is not None)
        compared = _compared_columns(pipeline, raw, table, schema)
        target = persisted(held, _target_rows(table, compared.columns)) if table is not None else None
        uid_rows = persisted(held, copies(target, [UID])) if target is not None else None
        holders = _uid_holders(spark, pipeline, uid_rows)
        records, counts = _records(spark, pipeline, raw, dead, holders, scope, compared, schema)
        held.callback(records.unpersist)
        compacted = kafka_admin.compacted_topics(pipeline.source.kafka, subscribed) if target is not None else set()
        findings += _row_findings(pipeline, records, target, compacted)
        report = _report(pipeline.name, counts, uid_rows, records, dead, notes + compared.notes)
        return replace(report, findings=tuple(findings))


def persisted(held: ExitStack, frame: DataFrame) -> DataFrame:
    """`frame` persisted until `held` closes."""
    return required(frame, held, "ingest verify")


def copies(frame: DataFrame, key: list[str]) -> DataFrame:
    """One row per `key` with `count`, its rows in `frame`."""
    return frame.groupBy(*key).count()


def _uid_holders(spark, pipeline: Pipeline, uid_rows: DataFrame | None) -> DataFrame | None:
    """Where a uid is accounted, one row per uid: the target; with hard deletes also the
    delete log, which holds the keys a tombstone or a cdc delete removed from the target."""
    target = uid_rows.select(UID) if uid_rows is not None else None
    if not pipeline.keeps_delete_log:
        return target
    from ingest.batch.merge import delete_log

    log = _read_delta(spark, delete_log.location(pipeline.target))
    if log is None or target is None:
        return target if log is None else log.select(UID).distinct()
    return target.unionByName(log.select(UID)).distinct()


def current_topic_ids(pipeline: Pipeline, subscribed) -> dict[str, str]:
    """The broker's id of each subscribed topic: a topic deleted and created again under
    the same name has a new one, and what was recorded under the old one (ledger
    entries, dead letters) is about records the topic no longer holds."""
    return kafka_admin.topic_ids(pipeline.source.kafka, set(subscribed)) if subscribed else {}


def read_topic(spark, pipeline: Pipeline) -> DataFrame:
    """The whole topic as one batch, with the query's own Kafka options."""
    options = kafka_options(pipeline.source.kafka, "earliest")
    options.pop("maxOffsetsPerTrigger", None)
    options["endingOffsets"] = "latest"
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


# --- the tables ------------------------------------------------------------------------


def _read_delta(spark, where) -> DataFrame | None:
    """A target or dead-letter table, or None when it was never created."""
    return delta.read(spark, where) if delta.table_exists(spark, where) else None


def dead_letters(spark, pipeline: Pipeline, only_topics=None, topic_ids=None) -> DataFrame:
    """This pipeline's dead letters by coordinates. With `topic_ids` (`current_topic_ids`),
    a row written under another id of its topic is left out: it is a record of an older
    topic of the same name, whose offsets the current one reuses. A row without an id
    (written before ids were) is kept."""
    rows = _read_delta(spark, pipeline.dead_letter)
    if rows is None:
        return spark.createDataFrame([], "topic STRING, partition INT, offset LONG")
    if only_topics is not None:
        rows = rows.where(F.col("_topic").isin(*only_topics))
    if topic_ids and TOPIC_ID in rows.columns:
        current = F.create_map(*[F.lit(part) for pair in sorted(topic_ids.items()) for part in pair])[F.col("_topic")]
        rows = rows.where(F.col(TOPIC_ID).isNull() | current.isNull() | (F.col(TOPIC_ID) == current))
    return rows.where(F.col("pipeline") == pipeline.name).select(
        F.col("_topic").alias("topic"), F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"))


# --- each record's fate -----------------------------------------------------------------


def _records(spark, pipeline: Pipeline, raw: DataFrame, dead: DataFrame, holders: DataFrame | None,
             scope: DataFrame, compared: Compared, schema) -> tuple[DataFrame, dict[str, Any]]:
    """One row per record of the topic: coordinates, uid, stage, and `fate`; persisted,
    by the pass that counts them (`_record_counts`).

    Every record's stage is re-derived, dead-lettered or not: a good record found in
    the dead letters is a finding, not accounted."""
    decoded = decode_records(raw, pipeline, schema)
    records = _judge(_staged(pipeline, decoded, (), compared), dead, holders, scope).persist()
    try:
        return records, _record_counts(records)
    except Exception as error:  # a record the transform fails on
        records.unpersist()
        if pipeline.transform is None or not transform.is_record_error(error):
            raise
    failed = transform.find_failing(decoded, pipeline.transform)
    records = _judge(_staged(pipeline, decoded, failed, compared), dead, holders, scope).persist()
    return records, _record_counts(records)


def _staged(pipeline: Pipeline, decoded: DataFrame, failed, compared: Compared) -> DataFrame:
    """The pipeline's own stages: transform (and where), then the uid; the values as
    two hashes: of every compared column, and without those the reader fills by a
    default (a row written before the table had the column holds null there)."""
    staged = staged_records(decoded, pipeline, failed)
    payload = compared.columns
    order_by = upsert_order(pipeline)
    return staged.select(*[F.col(f"{RAW}.{c}").alias(c) for c in COORDINATES],
                         F.col(f"{RAW}.timestamp").alias("__kafka_timestamp"),
                         F.col(UID).alias("uid"), F.col(STAGE).alias("stage"), F.col(REASON).alias("reason"),
                         (F.col(TOMBSTONE) if TOMBSTONE in staged.columns else F.lit(False)).alias("__tombstone"),
                         (F.expr(reference_sql(order_by)) if order_by else F.lit(None).cast("string")).alias("__order"),
                         payload_hash(payload).alias("__payload"),
                         payload_hash([c for c in payload if c not in compared.defaulted]).alias("__payload_alt"))


@dataclass(frozen=True)
class Compared:
    """The columns whose values are compared, those of them a default may have filled,
    and notes on reader columns the table does not have yet."""

    columns: list[str]
    defaulted: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()


def _compared_columns(pipeline: Pipeline, raw: DataFrame, target: DataFrame | None, schema) -> Compared:
    """The payload columns the table has: a reader schema newer than the table (registry
    `latest`) has columns the table gains only with the next batch. `schema`: the
    pipeline's `payload_schema`."""
    columns = _payload_columns(pipeline, raw, schema)
    if target is None:
        return Compared(columns)
    has = {c.lower() for c in target.columns}
    absent = [c for c in columns if c.lower() not in has]
    kept = [c for c in columns if c.lower() in has]
    notes = ((f"the reader schema has column(s) the table does not have yet: {', '.join(absent)}; their "
              "values are not compared (the table gains them with its next batch)",) if absent else ())
    return Compared(kept, frozenset(c for c in kept if c in _defaulted_fields(pipeline, schema)), notes)


def _defaulted_fields(pipeline: Pipeline, schema) -> set[str]:
    """Avro reader fields with a non-null default: a record written without the field
    reads the default, where a row written before the table had the column holds null."""
    if pipeline.source.format != "avro":
        return set()
    reader = schema.reader
    fields = json.loads(reader).get("fields", []) if isinstance(reader, str) else []
    return {f["name"] for f in fields if f.get("default") is not None}


def _payload_columns(pipeline: Pipeline, raw: DataFrame, schema) -> list[str]:
    """The columns the pipeline writes besides its own, in its order; without those
    computed by `current_timestamp()`, `rand()`... which differ on every evaluation."""
    decoded = decode(raw.limit(0), pipeline.source.format, schema)
    staged = with_uid(transform.apply(decoded, pipeline.transform), pipeline.uid, upsert_order(pipeline))
    changing = changing_columns(staged)
    return [c for c in staged.columns if c not in (RAW, STAGE, REASON, UID) and c.lower() not in changing]


def payload_hash(payload: list[str]) -> Column:
    """Every payload column, folded into one small value the audit keeps and compares
    with the target row's: the pipeline writes them all, so a transform that fails on
    a record must fail here too, not be pruned away by the optimizer."""
    if not payload:
        return F.lit(0).cast("long")
    return F.xxhash64(F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload])))


def _target_rows(table: DataFrame, payload_columns: list[str]) -> DataFrame:
    """What the audit judges of each target row: its uid, coordinates, values (as
    `payload_hash`) and delete state."""
    columns = {c.lower() for c in table.columns}
    deleted = F.coalesce(F.col("_deleted"), F.lit(False)) if "_deleted" in columns else F.lit(False)
    op = F.col("_op") if "_op" in columns else F.lit(None).cast("string")
    return table.select(UID, "_topic", "_partition", "_offset", payload_hash(payload_columns).alias("__row_payload"),
                        deleted.alias("__row_deleted"), op.alias("__row_op"))


def _judge(records: DataFrame, dead: DataFrame, holders: DataFrame | None, scope: DataFrame) -> DataFrame:
    """`records` with each one's `fate`. `dead`: the dead letters' `copies` by coordinates;
    `holders`: the uids the target accounts, one row each."""
    uids = (holders.select(F.col(UID).alias("__target_uid")) if holders is not None
            else records.sparkSession.createDataFrame([], "__target_uid STRING"))
    dead_here = dead.select(*COORDINATES).withColumn("__in_dead", F.lit(True))
    joined = (records.join(F.broadcast(scope), ["topic", "partition"], "left")
              .join(dead_here, COORDINATES, "left")
              .join(uids, F.col("uid") == F.col("__target_uid"), "left"))
    stage, offset, in_dead = F.col("stage"), F.col("offset"), F.col("__in_dead").isNotNull()
    failure = stage.isin(*FAILURE_STAGES)
    fate = (F.when(offset < F.coalesce(F.col("start"), F.lit(0)), F.lit(BEFORE_START))
            .when(F.col("end").isNull() | (offset >= F.col("end")), F.lit(NOT_YET_INGESTED))
            .when(failure & in_dead, F.lit(DEAD_LETTER))
            .when(in_dead, F.lit(UNACCOUNTED))  # a good or filtered record in the dead letters
            .when(stage == "filtered", F.lit(FILTERED))
            .when(stage.isNull() & F.col("__target_uid").isNotNull(), F.lit(IN_TARGET))
            .otherwise(F.lit(UNACCOUNTED)))
    why = (F.when(in_dead, F.format_string("a %s record (uid %s) is in the dead letters",
                                           F.coalesce(stage, F.lit("good")), F.coalesce(F.col("uid"), F.lit("-"))))
           .when(stage.isNull(), F.format_string("uid %s is not in the target", F.col("uid")))
           .otherwise(F.format_string("a %s failure (%s) that is not in the dead letters",
                                      stage, F.coalesce(F.col("reason"), F.lit("no reason")))))
    return joined.select(*COORDINATES, "__kafka_timestamp", "uid", "stage", fate.alias("fate"),
                         why.alias("why"), "__tombstone", "__order", "__payload", "__payload_alt")


def _row_findings(pipeline: Pipeline, records: DataFrame, target: DataFrame | None,
                  compacted: set[str]) -> list[str]:
    """Target rows that no record explains: presence of a uid is not enough. With
    insert_only, a row must sit at the coordinates of a good record with its uid and
    hold that record's values; with upsert, hold the values of the latest version
    (`order_by`, then Kafka timestamp, then position). Rows of uids no audited record
    reaches are not judged here (their records are before the start, not yet
    ingested, or gone from the topic). `target`: its `_target_rows`."""
    if target is None:
        return []
    good = records.where(F.col("fate") == IN_TARGET)
    rows = target.select(F.col(UID).alias("uid"), F.col("_topic").alias("topic"),
                         F.col("_partition").alias("partition"), F.col("_offset").alias("offset"),
                         "__row_payload")
    rows = rows.join(good.select("uid").distinct(), "uid", "left_semi")
    findings: list[str] = []
    if pipeline.target.mode == "upsert":
        if pipeline.deletes_by_tombstone:
            good = _tombstones_ordered(good)
        latest = Window.partitionBy("uid").orderBy(F.col("__order").desc_nulls_last(),
                                                    F.col("__kafka_timestamp").desc(),
                                                    *[F.col(c).desc() for c in COORDINATES])
        winners = (good.withColumn("__rank", F.row_number().over(latest)).where("__rank = 1")
                   .select("uid", F.col("__payload").alias("__expected"), "__tombstone",
                           F.col("__payload_alt").alias("__expected_alt")))
        # a deleted key's soft row keeps the values of the version it deleted: its delete state is judged
        wrong = rows.join(winners, "uid").where(~F.col("__tombstone")
                                                & (F.col("__row_payload") != F.col("__expected"))
                                                & (F.col("__row_payload") != F.col("__expected_alt")))
        if pipeline.deletes_by_tombstone:
            findings = _delete_findings(pipeline, target, winners)
        what = "does not hold the latest version (by order_by, then Kafka timestamp, then position)"
    else:
        wrong = _misplaced(rows, records, compacted)
        what = "is not at the coordinates of a record with its uid, or holds other values"
    count = wrong.count()
    if not count:
        return findings
    shown = wrong.orderBy("uid").limit(EXAMPLES).collect()
    examples = ", ".join(f"{r.uid} ({r.topic}/{r.partition}@{r.offset})" for r in shown)
    return [f"{count} target row(s) {what}: {examples}", *findings]


def _tombstones_ordered(good: DataFrame) -> DataFrame:
    """Each tombstone with the `order_by` of the version it deletes, as the MERGE gives
    it (merge_tombstones): the latest of its key's versions that precede it in Kafka
    order, within one partition by offset, across partitions by Kafka timestamp, then
    position. A tombstone nothing precedes keeps a null order and loses to any version."""
    versions = good.where(~F.col("__tombstone")).select(
        F.col("uid").alias("__v_uid"), F.col("__order").alias("__v_order"),
        F.struct(F.col("__kafka_timestamp"), *[F.col(c) for c in COORDINATES]).alias("__v_at"))
    tombstones = good.where(F.col("__tombstone"))
    here = F.struct(F.col("__kafka_timestamp"), *[F.col(c) for c in COORDINATES])
    same_partition = (F.col("__v_at.topic") == F.col("topic")) & (F.col("__v_at.partition") == F.col("partition"))
    precedes = (F.col("__v_uid") == F.col("uid")) & F.when(
        same_partition, F.col("__v_at.offset") < F.col("offset")).otherwise(F.col("__v_at") < here)
    taken = (tombstones.join(versions, precedes, "left").groupBy(*COORDINATES)
             .agg(F.max("__v_order").alias("__taken")))
    ordered = tombstones.join(taken, COORDINATES).withColumn("__order", F.col("__taken")).drop("__taken")
    return good.where(~F.col("__tombstone")).unionByName(ordered)


def _delete_findings(pipeline: Pipeline, target: DataFrame, winners: DataFrame) -> list[str]:
    """A key deleted by its latest record must be deleted in the table (soft: `_deleted`,
    `_op` 'd'; hard: no row), and a key whose latest record is a version must have a
    live row: a row deleted by hand is a finding even where the delete log holds its key."""
    rows = target.select(F.col(UID).alias("uid"), "__row_deleted", "__row_op")
    joined = winners.join(rows, "uid", "left")
    hard = pipeline.target.deletes == "hard"
    present = F.col("__row_deleted").isNotNull()
    if hard:
        wrong = joined.where(F.col("__tombstone") == present)
    else:  # a table written before `_op` existed holds null there: not held against it
        op_differs = F.col("__row_op").isNotNull() & (
            F.col("__row_op") != F.when(F.col("__tombstone"), F.lit("d")).otherwise(F.lit("u")))
        wrong = joined.where(~present | (F.col("__row_deleted") != F.col("__tombstone")) | op_differs)
    count = wrong.count()
    if not count:
        return []
    shown = wrong.orderBy("uid").limit(EXAMPLES).collect()
    state = ", ".join(f"{r.uid} ({'deleted' if r['__tombstone'] else 'live'} by its latest record, "
                      f"{_row_state(r['__row_deleted'])} in the table)" for r in shown)
    return [f"{count} key(s) whose delete state in the table is not their latest record's: {state}"]


def _row_state(deleted: bool | None) -> str:
    return "no row" if deleted is None else "deleted" if deleted else "live"


def _misplaced(rows: DataFrame, records: DataFrame, compacted: set[str]) -> DataFrame:
    """insert_only rows whose coordinates hold another record (another uid, a dead
    letter, other values) or no record at all. An offset the topic no longer has is
    not held against a row when Kafka removed it: below the partition's first
    offset (retention), or anywhere on a compacted topic (the cleaner keeps a later
    copy of the uid with the same key, the row keeps the first)."""
    there = records.select(*COORDINATES, F.lit(True).alias("__there"), F.col("uid").alias("__there_uid"),
                           F.col("stage").alias("__there_stage"), F.col("__payload").alias("__there_payload"),
                           F.col("__payload_alt").alias("__there_payload_alt"))
    first = records.groupBy("topic", "partition").agg(F.min("offset").alias("__first"))
    joined = rows.join(there, COORDINATES, "left").join(F.broadcast(first), ["topic", "partition"], "left")
    absent = F.col("__there").isNull()
    removed = (F.col("topic").isin(*sorted(compacted)) if compacted else F.lit(False)) | \
        (F.col("offset") < F.coalesce(F.col("__first"), F.lit(0)))
    other = (~F.col("__there_uid").eqNullSafe(F.col("uid")) | F.col("__there_stage").isNotNull()
             | ((F.col("__there_payload") != F.col("__row_payload"))
                & (F.col("__there_payload_alt") != F.col("__row_payload"))))
    return joined.where(F.when(absent, ~removed).otherwise(other))


# --- the report -------------------------------------------------------------------------


def _report(name: str, counts: dict[str, Any], uid_rows: DataFrame | None, records: DataFrame,
            dead: DataFrame, notes: tuple[str, ...]) -> VerifyReport:
    """`counts`: `_record_counts`; `uid_rows` and `dead`: the `copies` of each uid in the
    target and of each coordinate in the dead letters."""
    target_rows, duplicates = copy_counts(uid_rows) if uid_rows is not None else (0, 0)
    dead_rows, dead_copies = copy_counts(dead)
    return VerifyReport(
        pipeline=name, target_rows=target_rows, duplicates=duplicates, dead_letters=dead_rows,
        dead_letter_duplicates=dead_copies, notes=notes, **counts,
        duplicate_examples=_duplicate_examples(uid_rows) if duplicates else (),
        missing_examples=_missing_examples(records) if counts["missing"] else (),
        unaccounted_examples=_unaccounted_examples(records) if counts["unaccounted"] else (),
        dead_letter_duplicate_examples=_dead_letter_examples(dead) if dead_copies else (),
    )


def _record_counts(records: DataFrame) -> dict[str, Any]:  # Any: spread into VerifyReport's int fields
    fate, good = F.col("fate"), F.col("stage").isNull()
    audited = ~fate.isin(BEFORE_START, NOT_YET_INGESTED)

    def how_many(value: str):
        return F.sum(F.when(fate == value, 1).otherwise(0))

    row = records.agg(
        F.count(F.lit(1)).alias("topic_records"),
        how_many(BEFORE_START).alias("before_start"),
        how_many(NOT_YET_INGESTED).alias("not_yet_ingested"),
        how_many(FILTERED).alias("filtered"),
        how_many(UNACCOUNTED).alias("unaccounted"),
        F.count_distinct(F.when(audited & good, F.col("uid"))).alias("unique_uids"),
        F.count_distinct(F.when((fate == UNACCOUNTED) & good, F.col("uid"))).alias("missing"),
    ).first()
    return {key: int(value or 0) for key, value in row.asDict().items()}


def copy_counts(copies: DataFrame) -> tuple[int, int]:
    """(rows, keys with more than one row) of a `copies` frame."""
    row = copies.agg(F.sum("count").alias("rows"),
                     F.sum(F.when(F.col("count") > 1, 1).otherwise(0)).alias("dups")).first()
    return int(row.rows or 0), int(row.dups or 0)


def _duplicate_examples(uid_rows: DataFrame) -> tuple[Duplicate, ...]:
    rows = uid_rows.where(F.col("count") > 1).orderBy(UID).limit(EXAMPLES).collect()
    return tuple(Duplicate(r[UID], r["count"]) for r in rows)


def _missing_examples(records: DataFrame) -> tuple[Missing, ...]:
    first = F.min(F.struct(*COORDINATES)).alias("first")
    rows = (records.where((F.col("fate") == UNACCOUNTED) & F.col("stage").isNull())
            .groupBy("uid").agg(first).orderBy("first").limit(EXAMPLES).collect())
    return tuple(Missing(r.uid, r.first.topic, r.first.partition, r.first.offset) for r in rows)


def _unaccounted_examples(records: DataFrame) -> tuple[Unaccounted, ...]:
    rows = records.where(F.col("fate") == UNACCOUNTED).orderBy(*COORDINATES).limit(EXAMPLES).collect()
    return tuple(Unaccounted(r.topic, r.partition, r.offset, r.why) for r in rows)


def _dead_letter_examples(dead: DataFrame) -> tuple[DeadLetterCopies, ...]:
    rows = dead.where(F.col("count") > 1).orderBy(*COORDINATES).limit(EXAMPLES).collect()
    return tuple(DeadLetterCopies(r.topic, r.partition, r.offset, r["count"]) for r in rows)
