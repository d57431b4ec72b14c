"""Where a run starts: Spark's checkpoint, or the target's Delta log when the checkpoint is lost.

With a checkpoint, first the checks that it still describes the target and the
topics: a stop when a RESTORE undid committed batches or a topic was recreated.

Then the retention guard: if the offsets to resume from are no longer in Kafka,
stop and name each partition and the lost range, unless the pipeline allows
data loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.batch.commit import ledger
from ingest.batch.commit.owner import OwnerCheck
from ingest.batch.lost_ranges import Gap
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.kafka import checkpoint as spark_checkpoint
from ingest.kafka.checkpoint import read_state
from ingest.kafka.offsets import Offsets
from ingest.platform.delta import table_exists
from ingest.platform.files import delete_temp_files
from ingest.spec import template
from ingest.spec.locations import shown_location
from ingest.spec.model import Pipeline, Target

EARLIEST, LATEST = -2, -1  # Spark's per-partition markers in startingOffsets


class RetentionGap(IngestError):
    """Offsets to resume from were deleted by Kafka's retention."""


@dataclass(frozen=True)
class StartPlan:
    """`starting_offsets` is None when Spark resumes from its own checkpoint."""

    starting_offsets: Offsets | None
    resume_from: Offsets  # known positions, for the guard and progress
    notes: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)


class TargetLost(IngestError):
    """The checkpoint has committed batches, but the target they went to is gone."""


class TargetRewritten(IngestError):
    """The target no longer holds batches the checkpoint says were written."""


class TopicRecreated(IngestError):
    """A topic was deleted and created again under the same name."""


def plan_start(spark, pipeline: Pipeline, watermarks: dict[str, dict[int, tuple[int, int]]]) -> StartPlan:
    state = read_state(spark, pipeline.checkpoint)
    # (a table per topic: each table's own in _check_tables)
    if (state.last_committed_batch is not None and not template.is_per_topic(pipeline)
            and not table_exists(spark, pipeline.target)):
        # Going on would create an empty table and resume after everything the
        # checkpoint says was written: every record before it lost from the target.
        raise TargetLost(
            f"{pipeline.name}: checkpoint {shown_location(pipeline.checkpoint)} has committed batches up to "
            f"{state.last_committed_batch}, but the target {shown_location(pipeline.target.location)} does not exist "
            "(dropped, or its path or name changed); restore the table (or point target at it), "
            "or to load the topic again into a new table delete the checkpoint too")
    _check_owners(spark, pipeline, watermarks)
    _check_offset_log(spark, pipeline, state, watermarks)
    topic_ids = kafka_admin.topic_ids(pipeline.source.kafka, watermarks) if watermarks else {}
    cleared = []
    if not state.empty:  # Spark resumes from its own offset log (replays are no-ops)
        _check_tables(spark, pipeline, state, topic_ids)
        plan = StartPlan(None, state.committed_offsets or {})
    else:
        cleared = _clear_interrupted_first_batch(spark, pipeline)
        plan = _from_delta_log(spark, pipeline, watermarks, topic_ids)
    gaps = retention_gaps(plan.resume_from, watermarks)
    return StartPlan(plan.starting_offsets, plan.resume_from, cleared + plan.notes, gaps)


def _check_offset_log(spark, pipeline: Pipeline, state, watermarks) -> None:
    """Stop when the target has committed, under this checkpoint's app id, a batch id
    the checkpoint will plan again: its offsets/ and commits/ were reset, or an older
    copy of it restored, while `metadata` (the query id) was kept. Delta skips a write
    at or below the app id's txn version, so the new ranges would be reported done and
    never written. The txn version outlives Delta's log clean-up (unlike the history
    `ledger.check_replay` compares ranges in), so this check holds for any old pipeline.
    The one batch id above the last committed one may be in the target already: a run
    killed between its target commit and Spark's commit file."""
    query_id = spark_checkpoint.query_id(spark, pipeline.checkpoint)
    if query_id is None:
        return
    if state.last_committed_batch is not None:
        highest = state.last_committed_batch + 1
    else:  # a first batch planned (offsets/0) may have committed before the run was killed
        highest = -1 if state.planned_batch is None else 0
    for table, target in _targets(pipeline, watermarks):
        if not table_exists(spark, target):
            continue
        app = ledger.app_id(pipeline.name, query_id, table)
        known = ledger.txn_version(spark, target.location, bool(target.table), app, pipeline.name)
        if known is None or known <= highest:
            continue
        has = ("no committed batch" if state.last_committed_batch is None
               else f"committed batches up to {state.last_committed_batch} only")
        raise ledger.ReplayMismatch(
            f"{pipeline.name}: batch {known} was already committed to {target.location} under app id "
            f"{app}, but checkpoint {pipeline.checkpoint} has {has}. The checkpoint's offsets/ and "
            f"commits/ were reset, or an older copy of the checkpoint restored, while its metadata (the "
            f"query id) was kept: Spark would give new ranges batch ids the table has committed, Delta "
            f"would skip them and their records would be lost. Delete the whole checkpoint folder: the "
            f"next run resumes from the offsets recorded in {target.location} with a new app id.")


def _targets(pipeline: Pipeline, watermarks) -> list[tuple[str | None, Target]]:
    """(table key, target) of each table the pipeline writes; with a table per topic, those of
    the topics in `watermarks` (the key is part of the table's txn app id)."""
    if not template.is_per_topic(pipeline):
        return [(None, pipeline.target)]
    return [(table, template.for_topic(pipeline, topics[0]).target)
            for table, topics in sorted(template.tables_of(pipeline, watermarks or {}).items())]


def _check_owners(spark, pipeline: Pipeline, watermarks) -> None:
    """Each of its tables that exists is this pipeline's to write (`batch.commit.owner`): a run
    refused for one that another pipeline writes stops before its query plans a batch, so
    once its pattern is fixed it runs again as it is. A table made later is checked by the
    batch that first writes it."""
    for _, target in _targets(pipeline, watermarks):
        if table_exists(spark, target):
            OwnerCheck(pipeline.name, target).check(spark, before_start=True)


def _clear_interrupted_first_batch(spark, pipeline: Pipeline) -> list[str]:
    """A process killed while Spark wrote batch 0's offsets leaves a temporary file and no
    `offsets/0`; Spark (4.1 and later) then refuses to start a query in that folder, on
    every restart. Nothing was planned, so the file is dropped and the start is planned as
    for a checkpoint that is missing.
    On Spark Connect the pipeline's own session turns that check off instead
    (`platform.connect.pipeline_session`)."""
    root = pipeline.checkpoint.rstrip("/")
    dropped = [name for folder in ("offsets", "commits")
               for name in delete_temp_files(spark, f"{root}/{folder}") or []]
    if not dropped:
        return []
    return [f"{pipeline.name}: checkpoint {shown_location(pipeline.checkpoint)} holds no planned batch, only what an "
            f"interrupted first batch left ({', '.join(dropped)}); removed, as Spark does not start beside them"]


def _from_delta_log(spark, pipeline: Pipeline, watermarks, topic_ids: dict[str, str]) -> StartPlan:
    # The target's ledger alone: every batch ends with a target MERGE, and Delta
    # commits it (SetTransaction, commitInfo with the offsets) even when it writes
    # no row, so the target's log has every complete batch. The dead letters
    # commit first; taking them into account would skip a batch whose target
    # commit never happened. Replaying such a batch is a no-op in the dead
    # letters, which are merged on the records' coordinates.
    entries = _entries(spark, pipeline, watermarks)
    notes = []
    recreated = _recreated(entries, topic_ids)
    # Every entry, not the newest only: after a reset run on a recreated topic, the old
    # topic's entries (further offsets, under the old id) are still in the log.
    entries = ledger.of_current_topics(entries, topic_ids)
    if recreated:  # the checkpoint is gone: the operator's reset; the new topic is read as configured
        notes.append(f"{pipeline.name}: " + "; ".join(_describe_recreated(recreated)) +
                     ": the offsets recorded for the old topic are not used; the new one is read "
                     "from starting_offsets")
    recorded = ledger.recorded_offsets(entries)
    if not recorded:
        return StartPlan(None, {}, notes)
    offsets = {topic: {p: recorded.get(topic, {}).get(p, _unseen_start(pipeline, topic, p, recreated))
                       for p in parts}
               for topic, parts in (watermarks or recorded).items()}
    query_id = spark_checkpoint.query_id(spark, pipeline.checkpoint)
    app = "with a new app id" if query_id is None else f"under app id {ledger.app_id(pipeline.name, query_id)}"
    notes.append(f"{pipeline.name}: checkpoint {shown_location(pipeline.checkpoint)} is missing or empty; "
                 f"resuming from the offsets recorded in the Delta log of "
                 f"{shown_location(pipeline.target.location)}, {app}: "
                 + ", ".join(f"{t}/{p}:{o}" for t, parts in sorted(offsets.items())
                             for p, o in sorted(parts.items())))
    return StartPlan(offsets, recorded, notes)


def _entries(spark, pipeline: Pipeline, watermarks) -> list:
    if not template.is_per_topic(pipeline):
        return _ledger(spark, pipeline, pipeline.target)
    return per_table_entries(spark, pipeline, watermarks)


def per_table_entries(spark, pipeline: Pipeline, topics) -> list:
    """With a table per topic: each table's own ledger, and from it only the offsets
    of the topics that table takes."""
    entries = []
    for group in template.tables_of(pipeline, topics).values():
        one = template.for_topic(pipeline, group[0])
        for version, entry in _ledger(spark, one, one.target):
            own = {t: parts for t, parts in entry.get("end_offsets", {}).items() if t in group}
            entries.append((version, {**entry, "end_offsets": own}))
    return entries


def _ledger(spark, pipeline: Pipeline, table, live_only: bool = True) -> list:
    """This pipeline's ledger entries in the target, if it exists: by default those of
    the commits whose effect is still in the table (`ledger.history_entries`)."""
    location = Target(path=table.path, table=table.table)
    if not table_exists(spark, location):
        return []
    return ledger.history_entries(spark, table.location, bool(table.table), pipeline.name,
                                  live_only=live_only)


def _recreated(entries, topic_ids: dict[str, str]) -> dict[str, tuple[str, str]]:
    """topic -> (recorded id, current id), from the newest entry that names the topic."""
    changed, seen = {}, set()
    for _, entry in entries:
        for topic, recorded in (entry.get("topic_ids") or {}).items():
            if topic in seen:
                continue
            seen.add(topic)
            if topic in topic_ids and topic_ids[topic] != recorded:
                changed[topic] = (recorded, topic_ids[topic])
    return changed


def _describe_recreated(recreated: dict[str, tuple[str, str]]) -> list[str]:
    return [f"topic {t} was deleted and created again (topic id {old}, now {new})"
            for t, (old, new) in sorted(recreated.items())]


def _check_topics(pipeline: Pipeline, entries, topic_ids: dict[str, str]) -> None:
    recreated = _recreated(entries, topic_ids)
    if recreated:
        raise TopicRecreated(
            f"{pipeline.name}: " + "; ".join(_describe_recreated(recreated)) +
            f". Its offsets start again at 0, and those in checkpoint {shown_location(pipeline.checkpoint)} belong to "
            f"the old topic: resuming would skip or misread the new one. To ingest the new topic from "
            f"starting_offsets, delete the checkpoint {shown_location(pipeline.checkpoint)} and run again (the rows "
            f"already in {shown_location(pipeline.target.location)} stay; a uid seen before is not inserted again).")


def _check_tables(spark, pipeline: Pipeline, state, topic_ids: dict[str, str]) -> None:
    """The guards of a live checkpoint, on the target or, with a table per topic, on
    each table the checkpoint has read topics for (its own ledger and app id)."""
    if not template.is_per_topic(pipeline):
        entries = _ledger(spark, pipeline, pipeline.target)
        _check_topics(pipeline, entries, topic_ids)
        _check_target(spark, pipeline, state, entries)
        return
    started = spark_checkpoint.initial_offsets(spark, pipeline.checkpoint) or {}
    for table, topics in sorted(template.tables_of(pipeline, state.committed_offsets or {}).items()):
        one = template.for_topic(pipeline, topics[0])
        entries = _ledger(spark, one, one.target)
        _check_topics(one, entries, topic_ids)
        # a table is written by the batches that held records of its topics only
        if _read_records(state.committed_offsets or {}, started, topics):
            _check_target(spark, one, state, entries, table)


def _read_records(committed, started, topics) -> bool:
    """Whether the checkpoint has committed offsets past where it started, in any of `topics`."""
    return any(offset > started.get(topic, {}).get(partition, 0)
               for topic in topics for partition, offset in committed.get(topic, {}).items())


def _check_target(spark, pipeline: Pipeline, state, live, table: str | None = None) -> None:
    """Stop when the target's current version lacks batches the checkpoint committed
    (a RESTORE or REPLACE undid them, or the table was dropped or recreated): going on
    from the checkpoint would never write their records again. `table`: one table of a
    table per topic, which holds only the batches with records of its topics."""
    committed = state.last_committed_batch
    query_id = spark_checkpoint.query_id(spark, pipeline.checkpoint)
    if committed is None or query_id is None:
        return
    app = ledger.app_id(pipeline.name, query_id, table)
    target = pipeline.target
    reset = (f"To ingest them again, delete the checkpoint {shown_location(pipeline.checkpoint)}: the next run resumes "
             f"from the offsets the table's current version records, with a new app id.")
    if not table_exists(spark, target):
        raise TargetRewritten(
            f"{pipeline.name}: checkpoint {shown_location(pipeline.checkpoint)} has committed batches up to "
            f"{committed}, but the target {shown_location(target.location)} does not exist (dropped or moved): "
            f"their records are not in it. {reset}")
    # Any batch of the app id that is no longer live stops the run, whatever came after it:
    # a batch committed after a RESTORE is live, but Delta never rolls back a txn version,
    # so a batch the RESTORE undid can never be written again under this app id.
    live_batches = {int(e["batch_id"]) for _, e in live if e.get("app_id") == app}
    every = _ledger(spark, pipeline, target, live_only=False)
    undone = sorted({int(e["batch_id"]) for _, e in every if e.get("app_id") == app} - live_batches)
    if not undone:
        if table is None and live_batches and max(live_batches) >= committed:
            return
        known = ledger.txn_version(spark, target.location, bool(target.table), app, pipeline.name)
        if known is not None and (known >= committed or table is not None):
            return  # our commits are only out of the retained history (log clean-up), not undone
    what = (f"{_batches(undone)} of app id {app} {'was' if len(undone) == 1 else 'were'} undone (a "
            f"RESTORE or REPLACE of the table)" if undone else
            f"it holds no commit of app id {app} up to batch {committed} (the table was dropped and "
            f"created again, or is another table)")
    raise TargetRewritten(
        f"{pipeline.name}: the target {shown_location(target.location)} no longer matches checkpoint "
        f"{shown_location(pipeline.checkpoint)}, which has committed batches up to {committed}: {what}. Going on from "
        f"the checkpoint would leave their records out. {reset}")


def _batches(ids: list[int]) -> str:
    """`batch 1`, `batches 1-2`, `batches 1-2, 5`: sorted ids as runs."""
    runs: list[list[int]] = []
    for n in ids:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return ("batch " if len(ids) == 1 else "batches ") + text


def _unseen_start(pipeline: Pipeline, topic: str, partition: int, recreated) -> int:
    """Where a partition the ledger has never seen starts, the pipeline having started
    before (its ledger has entries): from its earliest offset, as a live checkpoint reads
    a partition added since (the configured `latest` would skip what it got while the
    pipeline was stopped). A recreated topic is read as configured: the operator's reset."""
    if topic in recreated:
        return _configured_start(pipeline, topic, partition)
    return EARLIEST


def _configured_start(pipeline: Pipeline, topic: str, partition: int) -> int:
    """As a new pipeline would start."""
    configured = pipeline.source.kafka.starting_offsets
    if isinstance(configured, str):
        return LATEST if configured == "latest" else EARLIEST
    return int(configured.get(topic, {}).get(partition, EARLIEST))


def retention_gaps(resume_from: Offsets, watermarks) -> list[Gap]:
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
                f"{shown_location(pipeline.dead_letter.location)} with stage lost: {line}" for line in lines]
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
