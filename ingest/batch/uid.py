"""The uid column, and one row per uid within a batch.

`fields` uids are the lowercase hex SHA-256 of the fields' string forms
(`CAST(f AS STRING)`) joined by the ASCII unit separator U+001F; a null field
makes the record a `uid` dead letter rather than a weaker key. A TIMESTAMP
field is written as its UTC wall clock: `CAST(ts AS STRING)` follows the
session time zone, so the same record would get another uid on a cluster set
to another zone. The UTC text is what a UTC session's cast gives, so tables
written from UTC sessions keep their uids.
`key` uids are the Kafka key read as UTF-8.
`coordinates` uids are `topic/partition/offset` with the numbers zero-padded
so that string order is Kafka order.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, TimestampType

from ingest.batch.staged import KEEP, RAW, REASON, STAGE
from ingest.spec.columns import UID
from ingest.spec.model import Uid
from ingest.spec.variant_path import VariantPath, is_path, reference_sql

FIELD_SEPARATOR = "\u001f"


def utc_text(column: str) -> Column:
    """`CAST(ts AS STRING)` as a UTC session gives it, in any session: the instant as
    epoch microseconds, added to the zone-less epoch (TIMESTAMP_NTZ has no zone)."""
    return F.expr(f"CAST(timestampadd(MICROSECOND, unix_micros({column}), "
                  "TIMESTAMP_NTZ'1970-01-01 00:00:00') AS STRING)")


def _field_text(name: str, schema: StructType | None) -> Column:
    if is_path(name):  # a path in a VARIANT column, read as its type
        path = VariantPath.parse(name)
        return utc_text(path.sql()) if path.read_as == "timestamp" else F.expr(path.sql()).cast("string")
    column = f"`{name}`"
    fields = {f.name.lower(): f for f in schema.fields} if schema is not None else {}
    field = fields.get(name.lower())
    if field is not None and isinstance(field.dataType, TimestampType):
        return utc_text(column)
    return F.col(column).cast("string")


def uid_column(uid: Uid, schema: StructType | None = None) -> Column:
    if uid.key:
        return F.col(f"{RAW}.key").cast("string")
    if uid.header is not None:
        matching = F.filter(F.col(f"{RAW}.headers"), lambda h: h["key"] == F.lit(uid.header))
        # `get`, not `element_at`: under ANSI mode (Spark 4's default) element_at fails the whole
        # batch for a record whose headers hold others but not this one; `get` gives null, a uid
        # dead letter
        return F.get(matching, 0)["value"].cast("string")
    if uid.field is not None:
        return F.expr(reference_sql(uid.field)).cast("string")
    if uid.fields:
        parts = [_field_text(name, schema) for name in uid.fields]
        any_null = F.lit(False)
        for part in parts:
            any_null = any_null | part.isNull()
        return F.when(~any_null, F.sha2(F.concat_ws(FIELD_SEPARATOR, *parts), 256))
    return F.format_string("%s/%05d/%020d", F.col(f"{RAW}.topic"), F.col(f"{RAW}.partition"),
                           F.col(f"{RAW}.offset"))


def _missing_reason(uid: Uid) -> str:
    if uid.key:
        return "Kafka key missing (null)"
    if uid.header is not None:
        return (f"header '{uid.header}' missing or null (uid.header: the producer must set it on every "
                "record)")
    if uid.field is not None and is_path(uid.field):
        return f"path {uid.field} is missing or null, or its value is not a {VariantPath.parse(uid.field).read_as}"
    if uid.field is not None:
        return f"field '{uid.field}' is null"
    if any(is_path(name) for name in uid.fields):
        return f"one of the fields {', '.join(uid.fields)} is missing or null (a path: or not of its type)"
    return f"one of the fields {', '.join(uid.fields)} is null"


def with_uid(staged: DataFrame, uid: Uid, order_by: str | None = None,
             unordered_ok: str | None = None) -> DataFrame:
    """Adds `_uid`; records without one become `uid` failures. With `order_by` (upsert),
    so does a record whose `order_by` is null: no rule could say whether it is newer
    than the row it would replace; except where the boolean column `unordered_ok` is
    true (a tombstone, which takes its order from the version it deletes)."""
    value = F.when(F.col(STAGE).isNull(), uid_column(uid, staged.schema))
    missing = F.col(STAGE).isNull() & value.isNull()
    reason = F.lit(_missing_reason(uid))
    if order_by is not None:
        unordered = F.col(STAGE).isNull() & value.isNotNull() & F.expr(reference_sql(order_by)).isNull()
        if unordered_ok is not None:
            unordered = unordered & ~F.col(unordered_ok)
        reason = F.when(missing, reason).otherwise(
            F.lit(f"order_by {'path' if is_path(order_by) else 'column'} '{order_by}' is null; upsert needs "
                  "it to tell the latest version"))
        missing = missing | unordered
    return staged.select(
        value.alias(UID),
        F.when(missing, F.lit("uid")).otherwise(F.col(STAGE)).alias(STAGE),
        F.when(missing, reason).otherwise(F.col(REASON)).alias(REASON),
        *[c for c in staged.columns if c not in (STAGE, REASON)],
    )


def mark_one_per_uid(staged: DataFrame, mode: str, order_by: str | None) -> DataFrame:
    """Adds KEEP, true on the one good row per uid that goes to the MERGE. Deterministic:
    insert_only keeps the first Kafka position, upsert the latest `order_by` (ties: the
    later Kafka timestamp, then the later position), the same rule as
    `merge.condition.upsert_condition`. A column rather than a filter, so the pass that
    counts the batch also counts the records that were not kept (a failed record has
    no uid, so it never shares a window with a good one)."""
    position = [F.col(f"{RAW}.topic"), F.col(f"{RAW}.partition"), F.col(f"{RAW}.offset")]
    if mode == "upsert":
        ordering = [F.expr(reference_sql(order_by)).desc_nulls_last(), F.col(f"{RAW}.timestamp").desc(),
                    *[c.desc() for c in position]]
    else:
        ordering = [c.asc() for c in position]
    rank = F.row_number().over(Window.partitionBy(UID).orderBy(*ordering))
    return staged.withColumn(KEEP, F.col(STAGE).isNull() & (rank == 1))


def one_per_uid(records: DataFrame, mode: str, order_by: str | None) -> DataFrame:
    """The records reduced to one row per uid (the rule of `mark_one_per_uid`)."""
    return mark_one_per_uid(records, mode, order_by).where(F.col(KEEP)).drop(KEEP)
