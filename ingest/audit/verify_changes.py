"""`ingest verify` for change data capture: the table equals the topic's changes applied in order.

The topic is read as one batch, up to the end offsets recorded in the target's
Delta log (later changes are not yet ingested), through the pipeline's own
envelope, transform and uid steps. For every key, its last change by
(`_sequence`, partition, offset) says what the table must hold: the row with
that change's columns and sequence, or the key deleted (soft: `_deleted` with
the delete's sequence; hard: no row; history: the key's last version is that
delete). With history, the key's last version is compared. Keys whose state
differs are reported, with what was expected and what was found.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ingest.audit.verify import read_topic
from ingest.batch import ledger, transform
from ingest.batch.cdc import DELETE, OP, SEQUENCE, decode_envelope
from ingest.batch.decode import STAGE
from ingest.batch.merge import table_exists
from ingest.batch.merge_changes import last_changes
from ingest.batch.processor import payload_schema
from ingest.batch.uid import UID, with_uid
from ingest.kafka import admin as kafka_admin
from ingest.spec.model import Pipeline

EXAMPLES = 5


@dataclass(frozen=True)
class KeyDifference:
    uid: str
    expected: str
    found: str


@dataclass(frozen=True)
class ChangesReport:
    pipeline: str
    changes: int  # changes applied (good envelopes up to the recorded end offsets)
    keys: int  # distinct keys among them
    live: int  # keys whose last change is not a delete
    deleted: int  # keys whose last change is a delete
    differing: int
    examples: tuple[KeyDifference, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.differing

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def verify_changes(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None) -> ChangesReport:
    """`only_topics`: one table of a pipeline with a table per topic, whose dead-letter
    table may be shared."""
    kafka_admin.check_reachable(pipeline.source.kafka)
    exists = table_exists(spark, pipeline.target)
    changes = _changes(spark, pipeline, read_topic(spark, pipeline), exists).persist()
    try:
        expected = _expected(changes, pipeline)
        found = _found(spark, pipeline, expected.columns) if exists else None
        return _compare(pipeline, changes, expected, found)
    finally:
        changes.unpersist()


def _changes(spark, pipeline: Pipeline, raw: DataFrame, exists: bool) -> DataFrame:
    target = pipeline.target
    entries = ledger.history_entries(spark, target.location, bool(target.table), pipeline.name) if exists else []
    ends = ledger.recorded_offsets(entries)
    consumed = F.lit(False)
    for topic, parts in ends.items():
        for partition, end in parts.items():
            consumed = consumed | ((F.col("topic") == topic) & (F.col("partition") == partition)
                                   & (F.col("offset") < end))
    decoded = decode_envelope(raw.where(consumed), pipeline.cdc, payload_schema(spark, pipeline))
    staged = with_uid(transform.apply(decoded, pipeline.transform), pipeline.uid)
    return staged.where(F.col(STAGE).isNull())


def _row_columns(frame: DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith("__") and c not in (UID, SEQUENCE, OP)]


def _expected(changes: DataFrame, pipeline: Pipeline) -> DataFrame:
    last = last_changes(changes)
    return last.select(UID, *[F.col(f"`{c}`") for c in _row_columns(changes)], SEQUENCE,
                       (F.col(OP) == DELETE).alias("__deleted"))


def _found(spark, pipeline: Pipeline, columns: list[str]) -> DataFrame:
    target = pipeline.target
    rows = spark.read.table(target.table) if target.table else spark.read.format("delta").load(target.path)
    if target.history:  # the key's last version: current, or the delete that ended it
        rows = rows.where(F.col("_valid_to").isNull())
    deleted = F.col("_deleted") if "_deleted" in rows.columns else F.lit(False)
    return rows.select(*[F.col(f"`{c}`") for c in columns if c != "__deleted"], deleted.alias("__deleted"))


def _state(frame: str, columns: list[str]) -> Column:
    """A key's state as text: 'deleted at S', 'absent', or the row and its sequence."""
    row = F.to_json(F.struct(*[F.col(f"{frame}.`{c}`") for c in columns]))
    return (F.when(F.col(f"{frame}.{UID}").isNull(), F.lit("absent"))
            .when(F.col(f"{frame}.__deleted"), F.format_string("deleted at %s", F.col(f"{frame}.{SEQUENCE}")))
            .otherwise(F.format_string("%s at %s", row, F.col(f"{frame}.{SEQUENCE}"))))


def _compare(pipeline: Pipeline, changes: DataFrame, expected: DataFrame, found: DataFrame | None) -> ChangesReport:
    columns = [c for c in _row_columns(expected) if c != "__deleted"]
    if found is None:
        found = expected.where(F.lit(False))
    hard = pipeline.target.deletes == "hard" and not pipeline.target.history
    joined = expected.alias("e").join(found.alias("f"), F.col(f"e.{UID}") == F.col(f"f.{UID}"), "full_outer")
    want, have = _state("e", columns), _state("f", columns)
    if hard:  # a hard-deleted key has no row
        want = F.when(F.col("e.__deleted"), F.lit("absent")).otherwise(want)
    judged = joined.select(F.coalesce(F.col(f"e.{UID}"), F.col(f"f.{UID}")).alias("uid"),
                           want.alias("expected"), have.alias("found"))
    differing = judged.where(F.col("expected") != F.col("found")).persist()
    try:
        examples = tuple(KeyDifference(r.uid, r.expected, r.found)
                         for r in differing.orderBy("uid").limit(EXAMPLES).collect())
        counts = expected.agg(F.count(F.lit(1)).alias("keys"),
                              F.sum(F.col("__deleted").cast("int")).alias("deleted")).first()
        return ChangesReport(pipeline.name, changes=changes.count(), keys=counts.keys,
                             live=counts.keys - (counts.deleted or 0), deleted=counts.deleted or 0,
                             differing=differing.count(), examples=examples)
    finally:
        differing.unpersist()
