"""What Spark's checkpoint says: the source offsets of the last committed batch.

Spark writes `offsets/<n>` (planned) before batch n runs and `commits/<n>`
after it; the last n with both is where the query resumes. Read through Spark
so any file system the checkpoint lives on works.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.batch.offset_log import local_path, parse_offsets_file  # noqa: F401 (run/ and audit/ read them here)


@dataclass(frozen=True)
class CheckpointState:
    last_committed_batch: int | None
    committed_offsets: dict[str, dict[int, int]] | None  # topic -> partition -> next offset
    planned_batch: int | None  # the highest offsets/<n>, committed or not

    @property
    def empty(self) -> bool:
        return self.planned_batch is None


def _batch_files(spark, folder: str) -> dict[int, str]:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    local = local_path(folder)
    if local is not None:  # no Spark job, and no stack trace logged for a missing folder
        if not local.is_dir():
            return {}
        return {int(f.name): f.read_text() for f in local.iterdir() if f.name.isdigit()}
    try:
        rows = (spark.read.option("wholetext", "true").text(folder)
                .select(F.col("_metadata.file_name").alias("name"), "value").collect())
    except AnalysisException:  # the folder does not exist
        return {}
    return {int(r.name): r.value for r in rows if r.name.isdigit()}


def read_state(spark, checkpoint: str) -> CheckpointState:
    root = checkpoint.rstrip("/")
    offsets = _batch_files(spark, f"{root}/offsets")
    commits = _batch_files(spark, f"{root}/commits")
    committed = [n for n in offsets if n in commits]
    if not committed:
        return CheckpointState(None, None, max(offsets) if offsets else None)
    last = max(committed)
    return CheckpointState(last, parse_offsets_file(offsets[last]), max(offsets))
