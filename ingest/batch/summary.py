"""What one pass over a batch's staged records learns: counts per stage, offsets per
partition, unique uids, the MERGE's literal bounds and the batch's duplicate uids, in one
aggregation (`summarize`); the commit's ledger entry and the MERGE's condition come from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch import duplicates
from ingest.batch.duplicates import GOOD, WINNER, Duplicates
from ingest.batch.merge import dead_letters
from ingest.batch.staged import RAW, STAGE, TOMBSTONE, UNKNOWN_FIELDS
from ingest.kafka.offsets import Offsets
from ingest.spec.columns import DELETE, OP, UID
from ingest.spec.model import Pipeline

STAGES = ("decode", "transform", "uid", "filtered")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# the grouping columns, named apart from any payload column
_TOPIC, _PARTITION, _BY_PARTITION = "__topic", "__partition", "__by_partition"


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
    duplicates: Duplicates = Duplicates()  # the uids with more than one good record, and their kept ones

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


def carries_unknown(frame: DataFrame) -> bool:
    """RAW carries the unknown fields' names (`source.unknown_fields: warn`)."""
    return UNKNOWN_FIELDS in frame.select(f"{RAW}.*").columns


def summarize(source: DataFrame, pipeline: Pipeline) -> BatchSummary:
    """Counts per stage, offsets, unique uids, MERGE bounds and the duplicate uids, in one
    aggregation over the staged records' narrow columns with two grouping sets: per Kafka
    partition, and per uid (whose groups of more than one good record come back with the
    record each keeps, `batch.duplicates`). A good record's uid is a kept record's uid, so
    the bounds and the unique count need no mark."""
    good = F.col(STAGE).isNull()
    aggregates = [F.count(F.lit(1)).alias("read"),
                  F.min(f"{RAW}.offset").alias("first"), F.max(f"{RAW}.offset").alias("last"),
                  F.sum(good.cast("long")).alias(GOOD), duplicates.winner(pipeline).alias(WINNER),
                  F.min(F.when(good, F.col(UID))).alias("uid_min"),
                  F.max(F.when(good, F.col(UID))).alias("uid_max")]
    aggregates += [F.sum(F.when(F.col(STAGE) == s, 1).otherwise(0)).alias(s) for s in STAGES]
    if pipeline.keeps_delete_log:
        deleting = F.col(TOMBSTONE) if pipeline.deletes_by_tombstone else F.col(OP) == DELETE
        aggregates.append(F.sum(F.when(F.col(STAGE).isNull() & deleting, 1).otherwise(0)).alias("deletes"))
    counts_unknown = carries_unknown(source)
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
        micros, within = F.unix_micros(F.col(f"`{horizon.column}`")), horizon.within_seconds * 1_000_000
        aggregates += [
            (F.min(F.when(good, micros)) - within).alias("lo"),
            (F.max(F.when(good, micros)) + within).alias("hi"),
            F.sum(F.when(good & micros.isNull(), 1).otherwise(0)).alias("null_horizon"),
        ]
    keyed = source.select("*", F.col(f"{RAW}.topic").alias(_TOPIC), F.col(f"{RAW}.partition").alias(_PARTITION))
    by_partition = F.grouping(UID) == 1
    rows = (keyed.groupingSets([[_TOPIC, _PARTITION], [UID]], _TOPIC, _PARTITION, UID)
            .agg(*aggregates, by_partition.alias(_BY_PARTITION))
            .where(F.col(_BY_PARTITION) | (F.col(GOOD) > 1)).collect())
    found = duplicates.from_rows([r for r in rows if not r[_BY_PARTITION]])
    return _summary([r for r in rows if r[_BY_PARTITION]], horizon is not None, pipeline.keeps_delete_log,
                    counts_unknown, found)


def _summary(rows, with_horizon: bool, with_deletes: bool = False, counts_unknown: bool = False,
             found: Duplicates = duplicates.NONE) -> BatchSummary:
    start: dict = {}
    end: dict = {}
    by_stage = {s: 0 for s in STAGES}
    for row in rows:
        start.setdefault(row[_TOPIC], {})[row[_PARTITION]] = row.first
        end.setdefault(row[_TOPIC], {})[row[_PARTITION]] = row.last + 1
        for s in STAGES:
            by_stage[s] += row[s]
    return BatchSummary(read=sum(r.read for r in rows), unique=sum(r[GOOD] for r in rows) - found.losers,
                        duplicates=found,
                        by_stage=by_stage, start_offsets=start, end_offsets=end,
                        bounds=_bounds(rows, with_horizon),
                        deletes=sum(r.deletes for r in rows) if with_deletes else 0,
                        unknown_fields=sum(r.unknown_fields for r in rows) if counts_unknown else 0,
                        unknown_example=next((r.unknown_example for r in rows if r.unknown_example), None)
                        if counts_unknown else None)


def _bounds(rows, with_horizon: bool) -> dict[str, str]:
    bounds = {}
    uids_min = [r.uid_min for r in rows if r.uid_min is not None]
    if uids_min:
        bounds["uid_min"] = min(uids_min)
        bounds["uid_max"] = max(r.uid_max for r in rows if r.uid_max is not None)
    # A record without the horizon column could match a target row anywhere: no bound then.
    if with_horizon and not any(r.null_horizon for r in rows):
        lows = [r.lo for r in rows if r.lo is not None]
        if lows:
            bounds["horizon_lo"] = utc_literal(min(lows))
            bounds["horizon_hi"] = utc_literal(max(r.hi for r in rows if r.hi is not None))
    return bounds


def utc_literal(micros: int) -> str:
    """An instant as text Spark's TIMESTAMP literal reads back exactly, whatever the
    session time zone: UTC with an explicit `Z`."""
    instant = _EPOCH + timedelta(microseconds=micros)
    return instant.strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"
