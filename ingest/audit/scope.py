"""What `ingest verify` audits: per partition, the offsets the pipeline has consumed.

The start is the spec's starting_offsets map, or for `latest` the first start the
target's ledger carries across checkpoints; the end is the target's ledger, or
further where the checkpoint or the dead-letter ledger says more was consumed.
Those extra ranges are audited, not skipped, and named as a finding when they hold
records (`outside_ledger`). Both the record audit (`verify`) and the change audit
(`verify_changes`) start from here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.commit import ledger
from ingest.kafka.checkpoint import initial_offsets, query_id, read_state
from ingest.kafka.offsets import Offsets
from ingest.platform import delta
from ingest.spec.locations import shown_location
from ingest.spec.model import Pipeline


def audit_scope(spark, pipeline: Pipeline, target_exists: bool, only_topics=None,
                topic_ids=None) -> tuple[DataFrame, tuple[str, ...], dict]:
    """(topic, partition, start, end) of the offsets to audit, the notes, and the ranges
    consumed beyond the target's ledger. A partition without an end has nothing
    ingested yet; the end is the target's ledger, or further where the pipeline
    consumed more (checkpoint, dead-letter ledger): those offsets are then audited,
    not skipped. `topic_ids` (`current_topic_ids`): the ledgers' entries count only
    for the topics they recorded under these ids."""
    target = pipeline.target
    entries = (ledger.history_entries(spark, target.location, bool(target.table), pipeline.name,
                                      topic_ids=topic_ids or None)
               if target_exists else [])
    ends = ledger.recorded_offsets(entries)
    starts, notes = _starts(spark, pipeline, entries)
    consumed = _consumed(spark, pipeline, only_topics, topic_ids)
    beyond: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in consumed.items():
        for partition, offset in parts.items():
            # The ledger's end is Spark's planned end, as the checkpoint's is: both count
            # the offsets transaction markers take, so a clean run has nothing beyond it.
            recorded = ends.get(topic, {}).get(partition)
            first = max(recorded or 0, starts.get(topic, {}).get(partition) or 0)
            if offset > first:
                beyond.setdefault(topic, {})[partition] = (first, offset)
                ends.setdefault(topic, {})[partition] = offset
    keys = sorted({(t, p) for side in (starts, ends) for t, parts in side.items() for p in parts})
    rows = [(t, p, starts.get(t, {}).get(p), ends.get(t, {}).get(p)) for t, p in keys]
    return spark.createDataFrame(rows, "topic STRING, partition INT, start LONG, end LONG"), notes, beyond


def _consumed(spark, pipeline: Pipeline, only_topics=None, topic_ids=None) -> Offsets:
    """How far the pipeline has read, by the witnesses other than the target: the
    checkpoint's last committed batch and the dead-letter table's ledger (each the
    end Spark planned for the batch)."""
    consumed: Offsets = {}
    dead = pipeline.dead_letter
    witnesses = [read_state(spark, pipeline.checkpoint).committed_offsets or {}]
    if delta.table_exists(spark, dead):
        witnesses.append(ledger.recorded_offsets(
            ledger.history_entries(spark, dead.location, bool(dead.table), pipeline.name,
                                   topic_ids=topic_ids or None)))
    for offsets in witnesses:
        for topic, parts in offsets.items():
            if only_topics is not None and topic not in only_topics:
                continue  # another table's topic: the checkpoint and dead letters are shared
            for partition, offset in parts.items():
                known = consumed.setdefault(topic, {})
                known[partition] = max(known.get(partition, 0), offset)
    return consumed


def outside_ledger(pipeline: Pipeline, raw: DataFrame, beyond, target_exists: bool) -> list[str]:
    """Ranges the checkpoint or the dead-letter ledger has consumed and the target's
    ledger has not, that hold records: a range of only transaction markers, aborted
    or compacted-away records has nothing that could have landed."""
    if not beyond:
        return []
    inside = F.lit(False)
    for topic, parts in beyond.items():
        for partition, (first, end) in parts.items():
            inside = inside | ((F.col("topic") == topic) & (F.col("partition") == partition)
                               & (F.col("offset") >= first) & (F.col("offset") < end))
    held = {(r.topic, r.partition): r["count"]
            for r in raw.where(inside).groupBy("topic", "partition").count().collect()}
    found = {t: {p: rng for p, rng in parts.items() if held.get((t, p))} for t, parts in beyond.items()}
    found = {t: parts for t, parts in found.items() if parts}
    if not found:
        return []
    records = sum(held.values())
    ranges = " ".join(f"{t}/{p}:{first}-{end}" for t, parts in sorted(found.items())
                      for p, (first, end) in sorted(parts.items()))
    if not target_exists:
        return [f"the target {shown_location(pipeline.target.location)} does not exist, but the pipeline has consumed "
                f"{ranges} ({records} record(s); checkpoint or dead-letter ledger): every good record of "
                "that range is audited as missing"]
    return [f"consumed beyond the target's ledger: {ranges} ({records} record(s)) per the checkpoint or "
            "the dead-letter ledger, not in the target's; those offsets are audited (a batch whose "
            "target commit did not happen: run the pipeline again to finish it)"]


def _starts(spark, pipeline: Pipeline, entries=()) -> tuple[dict, tuple[str, ...]]:
    configured = pipeline.source.kafka.starting_offsets
    if not isinstance(configured, str):
        return {t: dict(parts) for t, parts in configured.items()}, ()
    if configured == "earliest":
        return {}, ()
    # The first start, carried in the ledger across lost checkpoints. The checkpoint's own
    # start only for a topic no earlier checkpoint's entry names: otherwise recovery may
    # have seeded it (where the last checkpoint stopped) and it would hide a loss before it.
    initial = ledger.recorded_origin(entries) or {}
    seeded = _named_by_other_checkpoints(spark, pipeline, entries)
    for topic, parts in (initial_offsets(spark, pipeline.checkpoint) or {}).items():
        if topic not in initial and topic not in seeded:
            initial[topic] = parts
    if not initial:
        return {}, (f"starting_offsets is latest and neither the target's ledger nor "
                    f"{shown_location(pipeline.checkpoint)} holds the pipeline's first start: records from "
                    "before it are audited too",)
    return initial, ()


def _named_by_other_checkpoints(spark, pipeline: Pipeline, entries) -> set[str]:
    """The topics an entry written under another checkpoint (another app id) names."""
    own_query = query_id(spark, pipeline.checkpoint)
    own = ledger.app_id(pipeline.name, own_query) if own_query else None

    def is_own(app: str | None) -> bool:  # a table of a per-topic pipeline suffixes its app id
        return own is not None and app is not None and (app == own or app.startswith(own + "@"))
    return {topic for _, entry in entries if not is_own(entry.get("app_id"))
            for key in ("end_offsets", "start_offsets", "origin") for topic in (entry.get(key) or {})}
