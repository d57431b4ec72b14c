"""Where a run starts: Spark's checkpoint, or the target's Delta log when the checkpoint is lost.

Then the retention guard: if the offsets to resume from are no longer in Kafka,
stop and name each partition and the lost range, unless the pipeline allows
data loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.batch import ledger
from ingest.batch.merge import table_exists
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.run.checkpoint import read_state
from ingest.spec import template
from ingest.spec.model import Pipeline, Target

EARLIEST, LATEST = -2, -1  # Spark's per-partition markers in startingOffsets


class RetentionGap(IngestError):
    """Offsets to resume from were deleted by Kafka's retention."""


@dataclass(frozen=True)
class Gap:
    topic: str
    partition: int
    resume_at: int
    earliest: int

    def describe(self) -> str:
        return (f"{self.topic}/{self.partition}: offsets {self.resume_at}-{self.earliest - 1} "
                f"({self.earliest - self.resume_at} records) were deleted by retention")


@dataclass(frozen=True)
class StartPlan:
    """`starting_offsets` is None when Spark resumes from its own checkpoint."""

    starting_offsets: dict[str, dict[int, int]] | None
    resume_from: dict[str, dict[int, int]]  # known positions, for the guard and progress
    notes: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


class TargetLost(IngestError):
    """The checkpoint has committed batches, but the target they went to is gone."""


def plan_start(spark, pipeline: Pipeline, watermarks: dict[str, dict[int, tuple[int, int]]]) -> StartPlan:
    state = read_state(spark, pipeline.checkpoint)
    # (a table per topic: which tables a checkpoint has written is not known here)
    if (state.last_committed_batch is not None and not template.is_per_topic(pipeline)
            and not table_exists(spark, pipeline.target)):
        # Going on would create an empty table and resume after everything the
        # checkpoint says was written: every record before it lost from the target.
        raise TargetLost(
            f"{pipeline.name}: checkpoint {pipeline.checkpoint} has committed batches up to "
            f"{state.last_committed_batch}, but the target {pipeline.target.location} does not exist "
            "(dropped, or its path or name changed); restore the table (or point target at it), "
            "or to load the topic again into a new table delete the checkpoint too")
    if not state.empty:  # Spark resumes from its own offset log (replays are no-ops)
        plan = StartPlan(None, state.committed_offsets or {})
    else:
        plan = _from_delta_log(spark, pipeline, watermarks)
    gaps = retention_gaps(plan.resume_from, watermarks)
    return StartPlan(plan.starting_offsets, plan.resume_from, plan.notes, gaps)


def _from_delta_log(spark, pipeline: Pipeline, watermarks) -> StartPlan:
    # Both tables carry the ledger: a batch whose records all went to the dead
    # letters (or were all duplicates) leaves no target commit.
    entries = _entries(spark, pipeline, watermarks)
    recorded = ledger.recorded_offsets(entries)
    if not recorded:
        return StartPlan(None, {})
    # without the pre-flight (no watermarks) the partitions are those the log knows
    offsets = {topic: {p: recorded.get(topic, {}).get(p, _configured_start(pipeline, topic, p))
                       for p in parts}
               for topic, parts in (watermarks or recorded).items()}
    note = (f"{pipeline.name}: checkpoint {pipeline.checkpoint} is missing or empty; resuming from the "
            f"offsets recorded in the Delta logs of {pipeline.target.location} and "
            f"{pipeline.dead_letter.location}, with a new app id: "
            + ", ".join(f"{t}/{p}:{o}" for t, parts in sorted(offsets.items()) for p, o in sorted(parts.items())))
    return StartPlan(offsets, recorded, [note])


def _entries(spark, pipeline: Pipeline, watermarks) -> list:
    if not template.is_per_topic(pipeline):
        return _ledger(spark, pipeline, pipeline.target) + _ledger(spark, pipeline, pipeline.dead_letter)
    return per_table_entries(spark, pipeline, watermarks)


def per_table_entries(spark, pipeline: Pipeline, topics) -> list:
    """With a table per topic: each table's own ledger, and from it only the offsets
    of the topics that table takes (a dead-letter table the tables share holds the
    entries of all of them)."""
    entries = []
    for group in template.tables_of(pipeline, topics).values():
        one = template.for_topic(pipeline, group[0])
        for version, entry in _ledger(spark, one, one.target) + _ledger(spark, one, one.dead_letter):
            own = {t: parts for t, parts in entry.get("end_offsets", {}).items() if t in group}
            entries.append((version, {**entry, "end_offsets": own}))
    return entries


def _ledger(spark, pipeline: Pipeline, table) -> list:
    """This pipeline's ledger entries in a target or dead-letter table, if it exists."""
    location = Target(path=table.path, table=table.table)
    if not table_exists(spark, location):
        return []
    return ledger.history_entries(spark, table.location, bool(table.table), pipeline.name)


def _configured_start(pipeline: Pipeline, topic: str, partition: int) -> int:
    """A partition the Delta log has never seen starts as a new pipeline would."""
    configured = pipeline.source.kafka.starting_offsets
    if isinstance(configured, str):
        return LATEST if configured == "latest" else EARLIEST
    return int(configured.get(topic, {}).get(partition, EARLIEST))


def retention_gaps(resume_from: dict[str, dict[int, int]], watermarks) -> list[Gap]:
    gaps = []
    for topic, parts in sorted(resume_from.items()):
        for partition, offset in sorted(parts.items()):
            earliest = watermarks.get(topic, {}).get(partition, (None, None))[0]
            if offset >= 0 and earliest is not None and offset < earliest:
                gaps.append(Gap(topic, partition, offset, earliest))
    return gaps


def check_gaps(pipeline: Pipeline, plan: StartPlan) -> list[str]:
    """Raise on a retention gap; with allow_data_loss, return it as warnings."""
    if not plan.gaps:
        return []
    lines = [gap.describe() for gap in plan.gaps]
    if pipeline.source.kafka.allow_data_loss:
        return [f"{pipeline.name}: skipping records lost to retention (allow_data_loss); recorded in "
                f"{pipeline.dead_letter.location} with stage lost: {line}" for line in lines]
    raise RetentionGap(f"{pipeline.name}: cannot resume without losing data:\n  " + "\n  ".join(lines)
                       + "\nset on_data_loss: record to skip them and record each range in the dead letters")


def fetch_watermarks(pipeline: Pipeline) -> dict[str, dict[int, tuple[int, int]]]:
    """Fails fast, with a clear reason, when the broker is down or refuses us."""
    marks = kafka_admin.watermarks(pipeline.source.kafka)
    missing = [t for t in pipeline.source.kafka.topics if t not in marks]
    if missing:
        raise kafka_admin.BrokerUnreachable(
            f"{pipeline.name}: topic {', '.join(missing)} does not exist at "
            f"{pipeline.source.kafka.bootstrap_servers}")
    return marks
