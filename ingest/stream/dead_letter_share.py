"""`dead_letter.max_share`: a batch with a larger share of dead letters fails the run.

Checked where the batch report is consumed, after the batch committed: its records are
in the target or the dead letters, nothing is lost, and the next run goes on from the
next batch. A batch with dead letters pays for its most frequent reason, one aggregation
over the dead letters it wrote: for the error over the share, else for a note, read on
the supervisor's thread beside the next batch.
"""

from __future__ import annotations

from ingest.batch.processor import BatchReport
from ingest.platform.delta import read
from ingest.spec.locations import shown_location
from ingest.spec.model import Pipeline
from ingest.spec.template import TOPIC


def over_share(pipeline: Pipeline, report: BatchReport) -> bool:
    limit, s = pipeline.dead_letter.max_share, report.summary
    return limit is not None and s.read > 0 and s.dead_letters / s.read > limit


def over_share_message(spark, pipeline: Pipeline, report: BatchReport) -> str:
    s, dead = report.summary, pipeline.dead_letter
    where = shown_location(dead.location)
    return (f"pipeline {pipeline.name} batch {report.batch_id}: {s.dead_letters} of {s.read} records "
            f"({s.dead_letters / s.read:.0%}) are dead letters, more than dead_letter.max_share "
            f"{dead.max_share:g}; the most frequent reason {most_frequent_reason(spark, pipeline, report.batch_id)}; "
            f"the batch is committed (its dead letters in {where}, with their raw bytes); the run stops so "
            "the cause is fixed before more records follow")


def dead_letter_note(spark, pipeline: Pipeline, report: BatchReport) -> str:
    """What a user reads first of a batch's dead letters: where they are and why, mostly."""
    return (f"{pipeline.name} batch {report.batch_id}: {report.summary.dead_letters} dead letter(s) in "
            f"{shown_location(pipeline.dead_letter.location)}; the most frequent reason "
            f"{most_frequent_reason(spark, pipeline, report.batch_id)}")


def most_frequent_reason(spark, pipeline: Pipeline, batch_id: int) -> str:
    """`(N records): <reason>` among the batch's dead letters; what the table says is
    the evidence, so a table that cannot be read is told, not guessed at."""
    dead = pipeline.dead_letter
    if TOPIC in dead.location:  # one table per topic: the report does not say which
        return f"is in the dead-letter tables ({shown_location(dead.location)})"
    try:
        from pyspark.sql import functions as F

        row = (read(spark, dead).where((F.col("pipeline") == pipeline.name) & (F.col("batch_id") == batch_id))
               .groupBy("reason").count().orderBy(F.desc("count"), "reason").first())
    except Exception as error:  # the run stops all the same; the table says why
        return f"could not be read ({type(error).__name__}); see the table"
    if row is None:
        return "is not in the table (written by another copy?)"
    return f"({row['count']} record{'' if row['count'] == 1 else 's'}): {row['reason']}"
