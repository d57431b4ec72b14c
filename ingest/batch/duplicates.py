"""One row per uid without moving the payload: the batch's duplicates found on narrow columns.

Duplicates are rare (a producer's retries), so rather than rank every record in a window over
`_uid` (a shuffle and sort of every column of every record), the summary's aggregation
(`batch.summary`) also groups the good records' narrow columns by uid: a uid with more than
one good record is a duplicate, and the aggregation picks its winner by the rule of
`uid.mark_one_per_uid`: insert_only the first Kafka position, upsert the latest `order_by`,
then the later Kafka timestamp, then the later position. Only those uids and their winners'
positions come back to the driver, and the MERGE source marks KEEP against them, row by row,
with no exchange. A batch with more duplicate uids than a plan should carry as literals is
marked by the window instead, the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ingest.batch.staged import KEEP, RAW, STAGE
from ingest.batch.uid import mark_one_per_uid
from ingest.spec.columns import UID
from ingest.spec.model import Pipeline

# above this many duplicate uids in one batch, the window marks KEEP (literal sets that large
# make a plan slow to build; the result is the same)
MAX_LITERAL_UIDS = 2_000
WINNER = "__winner"
GOOD = "__good"


@dataclass(frozen=True)
class Duplicates:
    """The uids with more than one good record in the batch, and where each one's kept record is."""

    uids: tuple[str, ...] = ()
    winners: tuple[str, ...] = ()  # `position_key` of each uid's kept record
    losers: int = 0  # good records not kept: what separates the good count from the unique one

    @property
    def too_many(self) -> bool:
        return len(self.uids) > MAX_LITERAL_UIDS


NONE = Duplicates()


def position_key() -> Column:
    """A record's Kafka position as one text: a topic name has no '/'."""
    return F.concat_ws("/", F.col(f"{RAW}.topic"), F.col(f"{RAW}.partition").cast("string"),
                       F.col(f"{RAW}.offset").cast("string"))


def ranks_upsert(pipeline: Pipeline) -> bool:
    """The upsert rule picks the kept record (else the first position), as `processor.mark_kept`."""
    from ingest.batch.merge.mode import applies_changes

    return bool(pipeline.target.mode == "upsert" and pipeline.target.order_by
                and not applies_changes(pipeline) and not pipeline.deletes_by_tombstone)


def winner(pipeline: Pipeline) -> Column:
    """The aggregate that picks a uid's kept record among its good ones: the greatest (upsert)
    or least (insert_only) ordering struct, the window's ordering as one value. Struct order is
    field by field with nulls first, so max prefers a non-null Kafka timestamp as the window's
    `desc()` (nulls last) does; a good upsert record has a non-null `order_by` (else it is a
    `uid` dead letter)."""
    good = F.col(STAGE).isNull()
    coordinates = [F.col(f"{RAW}.{c}").alias(c) for c in ("topic", "partition", "offset")]
    key = position_key().alias("key")  # after the coordinates, which are unique: it never decides
    if ranks_upsert(pipeline):
        ordering = F.struct(F.col(f"`{pipeline.target.order_by}`").alias("order_by"),
                            F.col(f"{RAW}.timestamp").alias("timestamp"), *coordinates, key)
        return F.max(F.when(good, ordering))["key"]
    return F.min(F.when(good, F.struct(*coordinates, key)))["key"]


def from_rows(rows) -> Duplicates:
    """The uid groups of the summary's aggregation that hold more than one good record."""
    found = [(r[UID], r[WINNER], r[GOOD]) for r in rows]
    return Duplicates(uids=tuple(u for u, _, _ in found), winners=tuple(w for _, w, _ in found),
                      losers=sum(n - 1 for _, _, n in found))


def mark(records: DataFrame, duplicates: Duplicates, pipeline: Pipeline) -> DataFrame:
    """KEEP on the one good record per uid: every good record of a uid seen once, and of a
    duplicate uid the record at its winner's position (a position is one record, of one uid)."""
    good = F.col(STAGE).isNull()
    if duplicates.too_many:
        return mark_one_per_uid(records, "upsert" if ranks_upsert(pipeline) else "insert_only",
                                pipeline.target.order_by if ranks_upsert(pipeline) else None)
    if not duplicates.uids:
        return records.withColumn(KEEP, good)
    kept = ~F.col(UID).isin(list(duplicates.uids)) | position_key().isin(list(duplicates.winners))
    return records.withColumn(KEEP, good & kept)
