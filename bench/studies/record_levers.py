"""The code as it was before a lever of issue #53, for a leg beside today's in one run
(`bench/run record_path --variant NAME`): each entry patches today's code back in place for
that leg, and nothing else. A lever's entry goes once its figures are in
bench/results/README.md; the commit that made the lever names the code it replaced."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator
from unittest import mock

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.bounds import merge_bounds
from ingest.batch.processor import STAGES, BatchSummary, mark_kept
from ingest.batch.staged import KEEP, RAW, STAGE, TOMBSTONE, UNKNOWN_FIELDS
from ingest.spec.columns import DELETE, OP, UID
from ingest.spec.model import Pipeline
from ingest.spec.variant_path import reference_sql


def summarize_by_sort(source: DataFrame, pipeline: Pipeline) -> BatchSummary:
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
    counts_unknown = UNKNOWN_FIELDS in source.select(f"{RAW}.*").columns
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
    return _by_partition(per_partition, horizon is not None, pipeline.keeps_delete_log, counts_unknown)


def _by_partition(rows, with_horizon: bool, with_deletes: bool = False, counts_unknown: bool = False) -> BatchSummary:
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


@contextmanager
def summary_by_sort() -> Iterator[None]:
    """Lever 1's before: the whole summary, uid bounds included, in one aggregation per Kafka
    partition (sort-based: min and max of text have no hash buffer)."""
    with mock.patch("ingest.batch.processor.summarize", summarize_by_sort):
        yield


@contextmanager
def changing_rows_always() -> Iterator[None]:
    """Lever 2's before: the upsert's rows that change nothing dropped by a join with the
    target before the MERGE, deletion vectors or not."""
    with mock.patch("ingest.batch.merge.upsert.writes_vectors", lambda session, pipeline: False):
        yield


BEFORE: dict[str, Callable] = {"summary-by-sort": summary_by_sort, "changing-rows": changing_rows_always}
