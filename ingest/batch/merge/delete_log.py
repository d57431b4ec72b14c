"""The delete log beside a target with hard deletes: once a row is gone, the log
remembers its key's delete, so a change that arrives later but is older loses.

cdc changes (`changes`) and tombstones by Kafka key (`tombstones`) log their
deletes here the same way; they differ only in the column that orders a key's
changes (`_sequence`, or the upsert's `order_by`) and in the ties after it. The
log is `<target>_deletes` (the dead-letter scheme), merged in its own commit under
the batch's txn id, before the target's, in a batch that has deletes. `ingest
maintain` purges the entries older than its horizon (`purge`); a change older than
a purged delete could then bring its row back, so the horizon must exceed the
latest a change can arrive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.merge.condition import sql_string
from ingest.batch.merge.target import create_table
from ingest.platform.delta import delta_table, table_exists
from ingest.spec.columns import DELETE, OP, SEQUENCE, UID
from ingest.spec.model import Pipeline, Target

SUFFIX = "_deletes"
COLUMNS = (UID, SEQUENCE, "_topic", "_partition", "_offset", "_kafka_timestamp", "_ingested_at")


def location(target: Target) -> Target:
    """Where hard deletes are remembered: beside the target, as the dead letters are."""
    if target.table:
        return Target(table=f"{target.table}{SUFFIX}")
    return Target(path=f"{target.path.rstrip('/')}{SUFFIX}")


def create(session, pipeline: Pipeline, rows: DataFrame) -> None:
    """The log with the columns of `rows` (its sequence already in `_sequence`), if missing."""
    log = location(pipeline.target)
    if not table_exists(session, log):
        # no checkpoint beside the batches for it: Delta's every 10 commits, in the committing thread
        create_table(session, log, rows.select(*COLUMNS), checkpoints_beside=False)


def after_logged_deletes(session, rows: DataFrame, target: Target, bounds: Mapping[str, str],
                         sequence: str, ties: Sequence[str], logs_deletes: bool = True) -> DataFrame:
    """Log the batch's deletes, then drop each change that a logged delete of its key
    supersedes. A key's changes are ordered by `sequence` (logged as `_sequence`),
    then `ties`; struct comparison orders a null sequence first.

    `logs_deletes` false (the batch's summary counted none): no MERGE into the log. It
    would write nothing, and its commit, a second or so a batch, records nothing the
    log is read for: recovery and replays go by the target's commits, and a replayed
    batch has no deletes either."""
    log = location(target)
    if logs_deletes:
        deletes = rows.where(F.col(OP) == DELETE).withColumn(SEQUENCE, F.col(f"`{sequence}`")).select(*COLUMNS)
        log_later = (f"struct(s.{SEQUENCE}, {', '.join('s.' + c for c in ties)}) > "
                     f"struct(t.{SEQUENCE}, {', '.join('t.' + c for c in ties)})")
        (delta_table(session, log).alias("t").merge(deletes.alias("s"), uid_condition(bounds))
         .whenMatchedUpdateAll(condition=log_later).whenNotMatchedInsertAll().execute())
    logged = delta_table(session, log).toDF()
    if "uid_min" in bounds:  # a literal bound lets Delta skip the log's files
        logged = logged.where(F.col(UID).between(bounds["uid_min"], bounds["uid_max"]))
    logged = logged.select(UID, SEQUENCE, *ties)
    joined = rows.alias("s").join(logged.alias("l"), F.col(f"s.{UID}") == F.col(f"l.{UID}"), "left")
    # struct comparison needs the same field names on both sides
    newer = (F.struct(F.col(f"s.`{sequence}`").alias("o"), *[F.col(f"s.{c}").alias(c) for c in ties])
             > F.struct(F.col(f"l.{SEQUENCE}").alias("o"), *[F.col(f"l.{c}").alias(c) for c in ties]))
    keep = (F.col(f"s.{OP}") == DELETE) | F.col(f"l.{UID}").isNull() | newer
    return joined.where(keep).select(*[F.col(f"s.`{c}`").alias(c) for c in rows.columns])


def uid_condition(bounds: Mapping[str, str]) -> str:
    """The log has no payload columns: only the uid bounds apply to it."""
    parts = ["t._uid = s._uid"]
    if "uid_min" in bounds and "uid_max" in bounds:
        parts.append(f"t._uid BETWEEN {sql_string(bounds['uid_min'])} AND {sql_string(bounds['uid_max'])}")
    return " AND ".join(parts)


def purge(session, pipeline: Pipeline, older_than_seconds: int) -> int:
    """What `ingest maintain` does with the log: forget the deletes logged longer ago
    than the horizon (by `_ingested_at`). Returns how many went."""
    log = location(pipeline.target)
    if not table_exists(session, log):
        return 0
    name = log.table or "delta.`" + log.path.replace("`", "``") + "`"
    # SQL, not DeltaTable.delete: its result row says how many entries went
    done = session.sql(f"DELETE FROM {name} WHERE _ingested_at < "
                       f"current_timestamp() - INTERVAL {int(older_than_seconds)} SECONDS").collect()
    return int(done[0][0]) if done else 0
