"""What Spark's checkpoint says: the source offsets of the last committed batch.

Spark writes `offsets/<n>` (planned) before batch n runs and `commits/<n>`
after it; the last n with both is where the query resumes. Read through Spark
so any file system the checkpoint lives on works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckpointState:
    last_committed_batch: int | None
    committed_offsets: dict[str, dict[int, int]] | None  # topic -> partition -> next offset
    planned_batch: int | None  # the highest offsets/<n>, committed or not

    @property
    def empty(self) -> bool:
        return self.planned_batch is None


def local_path(location: str) -> Path | None:
    """The local (or mounted) path of a location, or None for an object-store URI."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").removeprefix("//"))
    if "://" in location or location.startswith("dbfs:"):
        return None
    return Path(location)


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


def parse_offsets_file(text: str) -> dict[str, dict[int, int]]:
    """`v1`, the batch metadata, then one line per source: the Kafka source's JSON."""
    lines = [line for line in text.splitlines() if line.strip()]
    source = json.loads(lines[2]) if len(lines) > 2 else {}
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in source.items()}
