"""`ingest verify`: audit the target and the dead letters against the topic, with no
help from Spark's checkpoint.

Every record of the topic must end in exactly one place (pipeline-spec.md): the
target (by its uid: a second copy of a uid is accounted by the first), the dead
letters (by topic/partition/offset), or the `transform.where` filter. The topic is
read as one batch (read_committed), each record's uid is computed by the pipeline's
own decode, transform and uid functions, and the rest is Spark joins: nothing loops
over records on the driver.

What is audited, per partition, is what the pipeline has consumed: offsets from its
start (the spec's starting_offsets map, or the checkpoint's initial offsets for
`latest`) up to the end offset recorded in the target's Delta log. Later records
are "not yet ingested", so verify can run while a pipeline lags.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ingest.batch import ledger, transform
from ingest.batch.decode import RAW, REASON, STAGE, decode
from ingest.batch.merge import table_exists
from ingest.batch.processor import payload_schema, upsert_order
from ingest.batch.uid import UID, with_uid
from ingest.kafka import admin as kafka_admin
from ingest.kafka.source import kafka_options
from ingest.run.checkpoint import local_path
from ingest.spec.model import Pipeline

EXAMPLES = 5
COORDINATES = ["topic", "partition", "offset"]
# Where a record of the topic went; `unaccounted` is the finding.
IN_TARGET, DEAD_LETTER, FILTERED, UNACCOUNTED = "target", "dead_letter", "filtered", "unaccounted"
BEFORE_START, NOT_YET_INGESTED = "before_start", "not_yet_ingested"


@dataclass(frozen=True)
class Duplicate:
    uid: str
    rows: int


@dataclass(frozen=True)
class Missing:
    uid: str
    topic: str  # where the uid's first copy is
    partition: int
    offset: int


@dataclass(frozen=True)
class Unaccounted:
    topic: str
    partition: int
    offset: int
    why: str


@dataclass(frozen=True)
class DeadLetterCopies:
    topic: str
    partition: int
    offset: int
    rows: int


@dataclass(frozen=True)
class VerifyReport:
    pipeline: str
    topic_records: int  # every record read from the topic (read_committed)
    before_start: int  # before the pipeline's starting offsets: not audited
    not_yet_ingested: int  # after the end offsets in the Delta log: not audited
    unique_uids: int  # distinct uids of the audited records that reach the MERGE
    target_rows: int
    dead_letters: int  # rows of this pipeline in the dead-letter table
    filtered: int  # audited records that transform.where drops
    duplicates: int  # uids with more than one target row
    missing: int  # uids of audited records in neither the target, dead letters nor filter
    unaccounted: int  # audited offsets in none of the three
    dead_letter_duplicates: int  # offsets with more than one dead-letter row
    duplicate_examples: tuple[Duplicate, ...] = ()
    missing_examples: tuple[Missing, ...] = ()
    unaccounted_examples: tuple[Unaccounted, ...] = ()
    dead_letter_duplicate_examples: tuple[DeadLetterCopies, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unaccounted or self.dead_letter_duplicates)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def verify(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None) -> VerifyReport:
    """Audit `pipeline`'s target and dead letters against its topic. `only_topics`: one
    table of a pipeline with a table per topic, whose dead-letter table may be shared."""
    # Spark's Kafka client retries refused credentials for minutes: ask first, fail fast.
    kafka_admin.check_reachable(pipeline.source.kafka)
    target = _read_delta(spark, pipeline.target)
    dead = _dead_letters(spark, pipeline, only_topics)
    scope, notes = _scope(spark, pipeline, target is not None)
    raw = read_topic(spark, pipeline).persist()
    try:
        records = _records(spark, pipeline, raw, dead, target, scope)
        try:
            return _report(pipeline.name, records, target, dead, notes)
        finally:
            records.unpersist()
    finally:
        raw.unpersist()


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
    if not table_exists(spark, where):
        return None
    return spark.read.table(where.table) if where.table else spark.read.format("delta").load(where.path)


def _dead_letters(spark, pipeline: Pipeline, only_topics=None) -> DataFrame:
    rows = _read_delta(spark, pipeline.dead_letter)
    if rows is None:
        return spark.createDataFrame([], "topic STRING, partition INT, offset LONG")
    if only_topics is not None:
        rows = rows.where(F.col("_topic").isin(*only_topics))
    return rows.where(F.col("pipeline") == pipeline.name).select(
        F.col("_topic").alias("topic"), F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"))


# --- what the pipeline has consumed ----------------------------------------------------


def _scope(spark, pipeline: Pipeline, target_exists: bool) -> tuple[DataFrame, tuple[str, ...]]:
    """(topic, partition, start, end) of the offsets to audit; a partition without an end
    has nothing ingested yet."""
    target = pipeline.target
    entries = (ledger.history_entries(spark, target.location, bool(target.table), pipeline.name)
               if target_exists else [])
    ends = ledger.recorded_offsets(entries)
    starts, notes = _starts(spark, pipeline)
    keys = sorted({(t, p) for side in (starts, ends) for t, parts in side.items() for p in parts})
    rows = [(t, p, starts.get(t, {}).get(p), ends.get(t, {}).get(p)) for t, p in keys]
    return spark.createDataFrame(rows, "topic STRING, partition INT, start LONG, end LONG"), notes


def _starts(spark, pipeline: Pipeline) -> tuple[dict, tuple[str, ...]]:
    configured = pipeline.source.kafka.starting_offsets
    if not isinstance(configured, str):
        return {t: dict(parts) for t, parts in configured.items()}, ()
    if configured == "earliest":
        return {}, ()
    initial = initial_offsets(spark, pipeline.checkpoint)
    if initial is None:
        return {}, (f"starting_offsets is latest and {pipeline.checkpoint} holds no initial offsets: "
                    "records from before the pipeline's first start are audited too",)
    return initial, ()


def initial_offsets(spark, checkpoint: str) -> dict[str, dict[int, int]] | None:
    """Where the checkpoint's query started: Spark's Kafka source writes it in sources/0/0."""
    text = _read_text(spark, f"{checkpoint.rstrip('/')}/sources/0/0")
    lines = [line for line in (text or "").splitlines() if line.strip().startswith("{")]
    if not lines:
        return None
    return {topic: {int(p): int(o) for p, o in parts.items()}
            for topic, parts in json.loads(lines[-1]).items()}


def _read_text(spark, location: str) -> str | None:
    from pyspark.errors import AnalysisException

    local = local_path(location)
    if local is not None:
        return local.read_text(errors="replace") if local.is_file() else None
    try:
        rows = spark.read.option("wholetext", "true").text(location).collect()
    except AnalysisException:  # no such file
        return None
    return rows[0].value if rows else None


# --- each record's fate -----------------------------------------------------------------


def _records(spark, pipeline: Pipeline, raw: DataFrame, dead: DataFrame, target: DataFrame | None,
             scope: DataFrame) -> DataFrame:
    """One row per record of the topic: coordinates, uid, stage, and `fate`; persisted."""
    live = raw.join(dead, COORDINATES, "left_anti")
    dead_in_topic = raw.join(dead, COORDINATES, "left_semi").select(
        *COORDINATES, F.lit(None).cast("string").alias("uid"), F.lit(DEAD_LETTER).alias("stage"),
        F.lit(None).cast("string").alias("reason"), F.lit(0).cast("long").alias("__payload"))
    decoded = decode(live, pipeline.source.format, payload_schema(spark, pipeline))
    records = _judge(_staged(pipeline, decoded, ()).unionByName(dead_in_topic), target, scope).persist()
    try:
        records.count()
        return records
    except Exception as error:  # a record the transform fails on, missing from the dead letters
        records.unpersist()
        if pipeline.transform is None or not transform.is_record_error(error):
            raise
    failed = transform.find_failing(decoded, pipeline.transform)
    return _judge(_staged(pipeline, decoded, failed).unionByName(dead_in_topic), target, scope).persist()


def _staged(pipeline: Pipeline, decoded: DataFrame, failed) -> DataFrame:
    """The pipeline's own stages: transform (and where), then the uid."""
    staged = with_uid(transform.apply(decoded, pipeline.transform, failed), pipeline.uid,
                      upsert_order(pipeline))
    payload = [F.col(f"`{c}`") for c in staged.columns if c not in (RAW, STAGE, REASON, UID)]
    return staged.select(*[F.col(f"{RAW}.{c}").alias(c) for c in COORDINATES],
                         F.col(UID).alias("uid"), F.col(STAGE).alias("stage"), F.col(REASON).alias("reason"),
                         _evaluated(payload).alias("__payload"))


def _evaluated(payload: list) -> Column:
    """Every payload column, folded into one small value the audit keeps: the pipeline
    writes them all, so a transform that fails on a record must fail here too, not be
    pruned away by the optimizer."""
    if not payload:
        return F.lit(0).cast("long")
    return F.xxhash64(F.to_json(F.struct(*payload)))


def _judge(records: DataFrame, target: DataFrame | None, scope: DataFrame) -> DataFrame:
    uids = (target.select(F.col(UID).alias("__target_uid")).distinct() if target is not None
            else records.sparkSession.createDataFrame([], "__target_uid STRING"))
    joined = (records.join(F.broadcast(scope), ["topic", "partition"], "left")
              .join(uids, F.col("uid") == F.col("__target_uid"), "left"))
    stage, offset = F.col("stage"), F.col("offset")
    fate = (F.when(offset < F.coalesce(F.col("start"), F.lit(0)), F.lit(BEFORE_START))
            .when(F.col("end").isNull() | (offset >= F.col("end")), F.lit(NOT_YET_INGESTED))
            .when(stage == DEAD_LETTER, F.lit(DEAD_LETTER))
            .when(stage == "filtered", F.lit(FILTERED))
            .when(stage.isNull() & F.col("__target_uid").isNotNull(), F.lit(IN_TARGET))
            .otherwise(F.lit(UNACCOUNTED)))
    why = (F.when(stage.isNull(), F.format_string("uid %s is not in the target", F.col("uid")))
           .otherwise(F.format_string("a %s failure (%s) that is not in the dead letters",
                                      stage, F.coalesce(F.col("reason"), F.lit("no reason")))))
    return joined.select(*COORDINATES, "uid", "stage", fate.alias("fate"), why.alias("why"), "__payload")


# --- the report -------------------------------------------------------------------------


def _report(name: str, records: DataFrame, target: DataFrame | None, dead: DataFrame,
            notes: tuple[str, ...]) -> VerifyReport:
    counts = _record_counts(records)
    target_rows, duplicates = _target_counts(target)
    dead_rows, dead_copies = _dead_letter_counts(dead)
    return VerifyReport(
        pipeline=name, target_rows=target_rows, duplicates=duplicates, dead_letters=dead_rows,
        dead_letter_duplicates=dead_copies, notes=notes, **counts,
        duplicate_examples=_duplicate_examples(target) if duplicates else (),
        missing_examples=_missing_examples(records) if counts["missing"] else (),
        unaccounted_examples=_unaccounted_examples(records) if counts["unaccounted"] else (),
        dead_letter_duplicate_examples=_dead_letter_examples(dead) if dead_copies else (),
    )


def _record_counts(records: DataFrame) -> Mapping[str, int]:
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


def _target_counts(target: DataFrame | None) -> tuple[int, int]:
    if target is None:
        return 0, 0
    row = (target.groupBy(UID).count()
           .agg(F.sum("count").alias("rows"), F.sum(F.when(F.col("count") > 1, 1).otherwise(0)).alias("dups"))
           .first())
    return int(row.rows or 0), int(row.dups or 0)


def _dead_letter_counts(dead: DataFrame) -> tuple[int, int]:
    row = (dead.groupBy(*COORDINATES).count()
           .agg(F.sum("count").alias("rows"), F.sum(F.when(F.col("count") > 1, 1).otherwise(0)).alias("dups"))
           .first())
    return int(row.rows or 0), int(row.dups or 0)


def _duplicate_examples(target: DataFrame) -> tuple[Duplicate, ...]:
    rows = target.groupBy(UID).count().where(F.col("count") > 1).orderBy(UID).limit(EXAMPLES).collect()
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
    rows = (dead.groupBy(*COORDINATES).count().where(F.col("count") > 1)
            .orderBy(*COORDINATES).limit(EXAMPLES).collect())
    return tuple(DeadLetterCopies(r.topic, r.partition, r.offset, r["count"]) for r in rows)
