"""Table maintenance of a pipeline's target and dead letters: compaction and VACUUM.

Where deletion vectors are on (`delta.enableDeletionVectors`, ingest's default
where the MERGE updates), compaction first purges them (REORG TABLE ... APPLY
(PURGE)): each file with rows marked deleted is written again without them, so
readers stop reading rows only to drop them, and VACUUM can later remove the old
files and their vectors. OPTIMIZE alone rewrites only small files and those with
many rows deleted.

Safe while the pipeline runs: OPTIMIZE only rewrites files (a running MERGE that
loses the conflict check retries, see `batch.commit.conflicts`, and so does OPTIMIZE
here), and VACUUM never deletes a file younger than the longest of the
pipeline's `maintenance.vacuum_retain` and the table's own
`delta.deletedFileRetentionDuration`, so time travel a user asked for, and a
batch still reading an older snapshot, keep their files. Delta's retention
safety check is never switched off.

With hard deletes the delete log (`<target>_deletes`) is maintained too, and
vacuuming purges it first: a delete logged longer ago than
`maintenance.delete_log_retain` is forgotten (docs/cdc.md says why that
horizon must exceed the latest a change can arrive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ingest.batch.commit.conflicts import retry_conflicts
from ingest.batch.commit.ledger import TXN_APP_ID, TXN_VERSION, USER_METADATA
from ingest.batch.merge import delete_log
from ingest.kafka import admin as kafka_admin
from ingest.platform.connect import ConnectUnsupported, is_connect, pipeline_session, release
from ingest.platform.delta import delta_table, table_exists
from ingest.spec import template
from ingest.spec.columns import UID
from ingest.spec.model import Pipeline, Target
from ingest.spec.values import parse_duration

DELETE_LOG = "delete log"
DELTA_DEFAULT_RETENTION_S = 7 * 24 * 3600  # delta.deletedFileRetentionDuration's default
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(\w+?)s?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Files:
    count: int
    bytes: int


@dataclass(frozen=True)
class Maintained:
    table: str  # "target", "dead letters" or "delete log"
    location: str
    action: str  # "optimize" | "vacuum" | "purge"
    before: Files
    after: Files
    detail: str = ""

    def line(self) -> str:
        return (f"{self.table} {self.location}: {self.action}: {self.before.count} files "
                f"({_size(self.before.bytes)}) -> {self.after.count} files ({_size(self.after.bytes)})"
                + (f"; {self.detail}" if self.detail else ""))


def tables(pipeline: Pipeline) -> list[tuple[str, Target]]:
    dead = pipeline.dead_letter
    found = [("target", pipeline.target), ("dead letters", Target(path=dead.path, table=dead.table))]
    if pipeline.keeps_delete_log:
        found.append((DELETE_LOG, delete_log.location(pipeline.target)))
    return found


def maintain(spark, pipeline: Pipeline, optimize: bool, vacuum: bool, zorder: bool = False) -> list[Maintained]:
    if template.is_per_topic(pipeline):  # each topic's own target and dead letters
        topics = sorted(kafka_admin.partitions(pipeline.source.kafka))
        return [done for topic in topics
                for done in maintain(spark, template.for_topic(pipeline, topic), optimize, vacuum, zorder)]
    done = []
    for name, table in tables(pipeline):
        if not table_exists(spark, table):
            continue
        if optimize and deletion_vectors_on(spark, table):
            done.append(purge_vectors(spark, name, table))
        if optimize:
            done.append(compact(spark, name, table, zorder_by=UID if zorder and name == "target" else None))
        if vacuum and name == DELETE_LOG:
            done.append(purge(spark, table, pipeline))
        if vacuum:
            done.append(vacuum_table(spark, name, table, pipeline.operations.maintenance.vacuum_retain_seconds))
    return done


def compact(spark, name: str, table: Target, zorder_by: str | None = None) -> Maintained:
    before = files(spark, table)
    optimizer = _delta(spark, table).optimize()

    def run():
        return optimizer.executeZOrderBy(zorder_by) if zorder_by else optimizer.executeCompaction()

    retry_conflicts(run, f"OPTIMIZE of {table.location}")
    return Maintained(name, table.location, "optimize" + (f" (Z-order by {zorder_by})" if zorder_by else ""),
                      before, files(spark, table))


def purge_vectors(spark, name: str, table: Target) -> Maintained:
    """REORG TABLE ... APPLY (PURGE): the files with deletion vectors written again without
    their deleted rows (a commit like OPTIMIZE's, retried the same way on a conflict)."""
    before = files(spark, table)
    done = retry_conflicts(lambda: spark.sql(f"REORG TABLE {_sql_name(table)} APPLY (PURGE)").collect(),
                           f"REORG of {table.location}")
    metrics = done[0].metrics.asDict(recursive=True) if done and "metrics" in done[0] else {}
    rewritten = metrics.get("numFilesRemoved")
    return Maintained(name, table.location, "purge deletion vectors", before, files(spark, table),
                      "" if rewritten is None else f"{rewritten} files with deleted rows written again")


def deletion_vectors_on(spark, table: Target) -> bool:
    return _properties(spark, table).get("delta.enableDeletionVectors") == "true"


def vacuum_table(spark, name: str, table: Target, retain_seconds: int) -> Maintained:
    before = files(spark, table)
    table_retention = deleted_file_retention_s(spark, table)
    hours = max(retain_seconds, table_retention) / 3600
    retry_conflicts(lambda: _delta(spark, table).vacuum(hours), f"VACUUM of {table.location}")
    return Maintained(name, table.location, "vacuum", before, files(spark, table),
                      f"kept files removed in the last {hours:g} hours (longest of maintenance.vacuum_retain "
                      f"and the table's delta.deletedFileRetentionDuration)")


def purge(spark, table: Target, pipeline: Pipeline) -> Maintained:
    """Forget the deletes logged longer ago than maintenance.delete_log_retain."""
    keep = pipeline.operations.maintenance
    before = files(spark, table)
    purged = retry_conflicts(lambda: delete_log.purge(spark, pipeline, keep.delete_log_retain_seconds),
                             f"purge of the delete log {table.location}")
    return Maintained(DELETE_LOG, table.location, "purge", before, files(spark, table),
                      f"{purged} deletes logged more than {keep.delete_log_retain} ago forgotten "
                      "(maintenance.delete_log_retain)")


def files(spark, table: Target) -> Files:
    """Files in the table's current version (DESCRIBE DETAIL): what a reader opens."""
    detail = _delta(spark, table).detail().select("numFiles", "sizeInBytes").first()
    return Files(int(detail.numFiles or 0), int(detail.sizeInBytes or 0))


def deleted_file_retention_s(spark, table: Target) -> int:
    """The table's `delta.deletedFileRetentionDuration` ("interval 7 days"), default 7 days."""
    text = _properties(spark, table).get("delta.deletedFileRetentionDuration")
    match = _INTERVAL.match(text or "")
    if not match:
        return DELTA_DEFAULT_RETENTION_S
    seconds, _ = parse_duration(f"{match.group(1)} {match.group(2).lower()}")
    return seconds or DELTA_DEFAULT_RETENTION_S


def _delta(spark, table: Target):
    return delta_table(spark, table)


def _properties(spark, table: Target) -> dict:
    return _delta(spark, table).detail().select("properties").first().properties or {}


def _sql_name(table: Target) -> str:
    return table.table or "delta.`" + (table.path or "").replace("`", "``") + "`"


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


class OptimizeSchedule:
    """`maintenance.optimize_every`: compaction of the target between batches of a run.

    Counted in batches, not in reports: with a table per topic a batch reports once per
    table, and each compaction covers every table. The time form queues none while one
    is queued or running (a slow compaction would otherwise pile up one per batch)."""

    def __init__(self, pipeline: Pipeline, clock):
        self.pipeline, self.clock = pipeline, clock
        self.batches, self.last = 0, clock()
        self._batch_id: int | None = None
        self._pending = False
        self._session = None  # on Connect, the server session compaction runs on

    def due(self, batch_id: int | None = None) -> bool:
        """Once per batch id (None: every call is a batch of its own)."""
        if batch_id is not None and batch_id == self._batch_id:
            return False
        self._batch_id = batch_id
        every = self.pipeline.operations.maintenance
        self.batches += 1
        if every.optimize_every_batches:
            due = self.batches % every.optimize_every_batches == 0
        elif every.optimize_every_seconds:
            due = not self._pending and self.clock() - self.last >= every.optimize_every_seconds
        else:
            due = False
        self._pending = self._pending or due
        return due

    def prepare(self, spark) -> None:
        """Before the query starts: the session compaction will run on (refused now, not at
        the first compaction, where the server has none to give)."""
        self._own_session(spark)

    def run(self, spark) -> list[Maintained]:
        """Compaction of the target and dead letters (each topic's, for a per-topic target)."""
        self.last = self.clock()
        try:
            return maintain(self._own_session(spark), self.pipeline, optimize=True, vacuum=False)
        finally:
            self._pending = False

    def _own_session(self, spark):
        """Delta reads a commit's txn id and `userMetadata` from the session's conf at every
        commit. A classic query runs its batches on a session it cloned, so `spark` carries
        none of theirs; on Connect the batches may run on `spark` itself (a server that cannot
        clone), and an OPTIMIZE committed during a MERGE would record that batch as done:
        there compaction runs on a clone without the ledger's settings, or not at all."""
        if not is_connect(spark):
            return spark
        if self._session is None:
            own = pipeline_session(spark, {})
            if own is None:
                raise ConnectUnsupported(
                    f"{self.pipeline.name}: maintenance.optimize_every needs a Spark Connect server that "
                    "can clone sessions (Spark 4.2 or later): compaction beside the batches would share "
                    "their session, and its commits their ledger entries. Remove optimize_every and run "
                    "`ingest maintain --optimize` between runs, or use a classic session")
            for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA):
                own.conf.unset(key)
            self._session = own
        return self._session

    def close(self) -> None:
        """Let the server drop the session compaction ran on."""
        if self._session is not None:
            release(self._session)
            self._session = None
