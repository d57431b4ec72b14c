"""Which MERGE a pipeline's batch takes, and the rows it takes them from.

insert_only and upsert: `upsert.merge_batch`. cdc changes: `changes` (soft
or hard deletes) or, with `target.history`, `history` (SCD type 2).
Tombstones in an upsert by Kafka key: `tombstones`. Each is one commit into the
target under the txn id the caller has set.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from ingest.batch.commit import owner
from ingest.batch.merge import changes, delete_log, history, tombstones
from ingest.batch.merge.clauses import to_sql
from ingest.batch.merge.properties import evolution_properties, key_property
from ingest.batch.merge.target import MergeResult, create_table, target_rows
from ingest.batch.merge.upsert import merge_batch
from ingest.batch.staged import KEEP
from ingest.batch.uid import one_per_uid
from ingest.platform.delta import table_exists
from ingest.spec.model import Pipeline


def applies_changes(pipeline: Pipeline) -> bool:
    return pipeline.cdc is not None


def batch_rows(records: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The batch's good records as the rows the MERGE takes. Records already marked
    with KEEP (`uid.mark_one_per_uid`, `changes.mark_last`) are not ranked again."""
    marked = KEEP in records.columns
    if pipeline.target.history:
        return history.version_rows(records.drop(KEEP), pipeline)
    if applies_changes(pipeline):  # KEEP marks each key's last change (`changes.mark_last`)
        return changes.change_rows(records, pipeline)
    if pipeline.deletes_by_tombstone:
        return tombstones.change_rows(records.drop(KEEP), pipeline)
    if marked:
        return target_rows(records.where(records[KEEP]).drop(KEEP))
    return target_rows(one_per_uid(records, pipeline.target.mode, pipeline.target.order_by))


def mark_changes(records: DataFrame, pipeline: Pipeline) -> DataFrame | None:
    """KEEP on the rows a MERGE of changes takes (cdc without history); None for the other modes."""
    if applies_changes(pipeline) and not pipeline.target.history:
        return changes.mark_last(records)
    return None


def create_tables(session, pipeline: Pipeline, rows: DataFrame) -> None:
    """The target and, with hard deletes, its delete log, if no one has made them yet.
    Outside the txn id: a create under it would make the batch's MERGE look done."""
    if not table_exists(session, pipeline.target):  # its first commit names the pipeline that writes it
        create_table(session, pipeline.target, rows, {**evolution_properties(pipeline), **key_property(pipeline),
                                                      **owner.creation_properties(pipeline.name)})
    if pipeline.keeps_delete_log:
        if pipeline.deletes_by_tombstone:  # a tombstone's order_by is its logged sequence
            rows = rows.withColumn(changes.SEQUENCE, rows[f"`{pipeline.target.order_by}`"])
        delete_log.create(session, pipeline, rows)


def merge(session, rows: DataFrame, pipeline: Pipeline, bounds: dict[str, str],
          logs_deletes: bool = True) -> MergeResult:
    """`logs_deletes`: false when the batch holds no delete, so a delete log has nothing to take."""
    if pipeline.target.history:
        return history.merge_versions(session, rows, pipeline, bounds)
    if applies_changes(pipeline):
        return changes.merge_changes(session, rows, pipeline, bounds, logs_deletes)
    if pipeline.deletes_by_tombstone:
        return tombstones.merge_tombstones(session, rows, pipeline, bounds, logs_deletes)
    return merge_batch(session, rows, pipeline, bounds)


def merge_text(pipeline: Pipeline, condition: str) -> list[str]:
    """USING, ON and the WHEN clauses of the batch's MERGE, for `ingest plan`."""
    if pipeline.target.history:
        return ["USING (the batch's versions with the target's versions of its keys, intervals "
                "recomputed) AS s", f"ON {condition} AND t._valid_from = s._valid_from",
                *to_sql(history.clauses())]
    if pipeline.deletes_by_tombstone:
        return [tombstones.using(pipeline), f"ON {condition}", *to_sql(tombstones.clauses(pipeline))]
    hard = pipeline.target.deletes == "hard"
    rows = "the batch, each key's last change by _sequence, partition, offset"
    if hard:
        rows += ", minus changes older than the delete log's entry for their key"
    return [f"USING ({rows}) AS s", f"ON {condition}", *to_sql(changes.clauses(hard))]
