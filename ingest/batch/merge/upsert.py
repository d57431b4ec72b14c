"""MERGE one batch into the target table, keyed by `_uid`.

insert_only: a uid already in the table is left as it is (the first copy wins).
upsert: a matched row is replaced only by a later `order_by` (ties: later Kafka
position), so an old record arriving late never overwrites a newer one.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Iterator

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.merge.clauses import When, apply
from ingest.batch.merge.condition import merge_condition, upsert_condition
from ingest.batch.merge.target import COORDINATE_COLUMNS, MergeResult, executed
from ingest.platform.delta import delta_table, table_property
from ingest.spec.columns import UID
from ingest.spec.model import Pipeline
from ingest.spec.properties import DELETION_VECTORS


def compared_columns(rows: DataFrame, existing: DataFrame) -> tuple[str, ...]:
    """The payload columns an update could change; () when the batch brings a column the
    table lacks (schema evolution: every matched row then changes)."""
    own = {UID, *COORDINATE_COLUMNS}
    have = {c.lower() for c in existing.columns}
    payload = [c for c in rows.columns if c not in own]
    if any(c.lower() not in have for c in payload):
        return ()
    return tuple(payload)


def unordered_columns(rows: DataFrame) -> tuple[str, ...]:
    """The columns `<=>` cannot compare: a VARIANT (`source.schema: variant`), or a type
    holding one."""
    return tuple(f.name for f in rows.schema.fields if "variant" in f.dataType.simpleString())


def changing_rows(rows: DataFrame, existing: DataFrame, on: str, update: str) -> DataFrame:
    """The batch's rows an upsert would insert or really update. Delta's MERGE with
    an insert clause rewrites every file holding a matched uid, whatever the update
    condition says, so rows that would change nothing (an older version, the same
    values again) are dropped before it. Read with the MERGE's own bounded condition.
    Needed only where the table has no deletion vectors (`writes_vectors`)."""
    unchanged = (rows.alias("s").join(existing.alias("t"), F.expr(on), "inner")
                 .where(~F.coalesce(F.expr(update), F.lit(False)))
                 .select(F.col(f"s.{UID}").alias(UID)))
    return rows.join(unchanged, UID, "left_anti")


def merge_batch(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str]) -> MergeResult:
    """One MERGE, one commit. The caller sets the txn id on `session` around it."""
    target = pipeline.target
    table = delta_table(session, target)
    condition = merge_condition(pipeline, bounds)
    whens = [When(False, "insert *")]
    if target.mode == "upsert":
        payload = compared_columns(rows, table.toDF())
        update = upsert_condition(pipeline, payload, unordered_columns(rows))
        if not writes_vectors(session, pipeline):
            rows = changing_rows(rows, table.toDF(), condition, update)
        whens.insert(0, When(True, "update *", update))
    builder = table.alias("t").merge(rows.alias("s"), condition).withSchemaEvolution()
    with no_broadcast(session) if target.mode == "insert_only" else nullcontext():
        return executed(apply(builder, whens))


def writes_vectors(session, pipeline: Pipeline) -> bool:
    """The target takes deletion vectors (upsert tables ingest makes do, `merge.properties`).
    Then the MERGE's update condition alone is the filter: a matched row it leaves out is
    neither rewritten nor copied, its file only read again, so `changing_rows`' second
    read of the target would cost more than it saves. Without them, every file holding a
    matched uid is written again, and dropping the rows that change nothing first pays."""
    return (table_property(session, pipeline.target, DELETION_VECTORS) or "").lower() == "true"


@contextmanager
def no_broadcast(session) -> Iterator[None]:
    """The insert-only MERGE is an anti-join of the batch with the target's files the
    bounds leave. Broadcast, the target side is a Spark job of its own before the
    write, on every batch (even with no file to read); joined by sort and merge it is
    a stage of the write's job, and the batch side needs no shuffle (the cached source
    is partitioned on `_uid`). Set on the batch's session, as the txn id is."""
    key = "spark.sql.autoBroadcastJoinThreshold"
    before = session.conf.get(key, None)
    session.conf.set(key, "-1")
    try:
        yield
    finally:
        if before is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, before)
