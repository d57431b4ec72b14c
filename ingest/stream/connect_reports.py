"""Batch reports of a query on Spark Connect, read where the client can see them.

On Connect the batch function runs in a worker beside the server: its report
(`BatchReport`) never reaches this process. What does: the query's progress (which
batches ran, how long each took) and the target's Delta log, where each batch's commit
carries its ledger entry (counts, planned offsets) and Delta's MERGE metrics. A report
is rebuilt from those two, the same line `ingest run` prints on a classic session.

Differences from the worker's own report: the offsets are the planned range (the
ledger's), not the first and last record read, and the seconds are Spark's `addBatch`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ingest.batch.commit import ledger
from ingest.batch.merge.target import MergeResult
from ingest.batch.processor import STAGES, BatchReport, BatchSummary
from ingest.kafka.checkpoint import planned_end, read_state
from ingest.kafka.offsets import from_json
from ingest.platform.delta import at_location, table_exists
from ingest.spec import template
from ingest.spec.model import Pipeline

# More than the query's recent progress can hold between two polls (Spark keeps 100).
_HISTORY_ROWS = 200


@dataclass
class LedgerReports:
    """Reports of the batches `query` has finished since the last call, oldest first: one per
    batch, or with a table per topic one per table the batch wrote (as the router reports)."""

    spark: Any
    pipeline: Pipeline
    query: Any  # pyspark's StreamingQuery (Connect)
    seen: set[int] = field(default_factory=set)  # batches every table of which was reported
    reported: set[tuple[int, str | None]] = field(default_factory=set)  # (batch, table) of a batch not seen yet

    def new(self) -> list[BatchReport]:
        ran = {p.batchId: p for p in self.query.recentProgress
               if p.batchId not in self.seen and p.numInputRows > 0}
        expected = {batch_id: self._tables(progress) for batch_id, progress in ran.items()}
        reports = []
        for table, pipeline in {t: p for tables in expected.values() for t, p in tables.items()}.items():
            wanted = {b for b, tables in expected.items() if table in tables and (b, table) not in self.reported}
            commits = self._commits(pipeline, table, wanted) if wanted else {}
            for batch_id, (entry, metrics) in commits.items():  # a batch not in the log yet: asked again
                seconds = (ran[batch_id].durationMs or {}).get("addBatch", 0) / 1000
                name = self.pipeline.name if table is None else f"{self.pipeline.name} -> {table}"
                reports.append(BatchReport(name, batch_id, summary_of(entry), merge_result(metrics), seconds))
                self.reported.add((batch_id, table))
        done = {b for b, tables in expected.items() if all((b, t) in self.reported for t in tables)}
        self.seen |= done
        self.reported = {(b, t) for b, t in self.reported if b not in done}
        return sorted(reports, key=lambda report: report.batch_id)

    def _tables(self, progress) -> dict[str | None, Pipeline]:
        """The tables a batch wrote, each as its pipeline (None: the pipeline's one table)."""
        if not template.is_per_topic(self.pipeline):
            return {None: self.pipeline}
        return {table: template.for_topic(self.pipeline, topics[0])
                for table, topics in template.tables_of(self.pipeline, _advanced(progress)).items()}

    def _commits(self, pipeline: Pipeline, table: str | None, batch_ids: set[int]) -> dict[int, tuple[dict, dict]]:
        """batch id -> (ledger entry, MERGE metrics) of this query's commits in the target."""
        target = pipeline.target
        if not table_exists(self.spark, target):
            return {}
        app = ledger.app_id(self.pipeline.name, str(self.query.id), table)
        rows = (at_location(self.spark, target.location, bool(target.table)).history(_HISTORY_ROWS)
                .select("userMetadata", "operationMetrics").collect())
        found: dict[int, tuple[dict, dict]] = {}
        for row in rows:
            entry = ledger.parse_metadata(row.userMetadata)
            if entry and entry.get("app_id") == app and entry.get("batch_id") in batch_ids:
                found.setdefault(entry["batch_id"], (entry, row.operationMetrics or {}))
        return found


def _advanced(progress) -> set[str]:
    """The topics a batch read from: those whose offsets moved between its start and end."""
    topics: set[str] = set()
    for source in progress.sources:
        start = _offsets(source.startOffset)
        for topic, parts in _offsets(source.endOffset).items():
            if any(int(end) > int(start.get(topic, {}).get(part, 0)) for part, end in parts.items()):
                topics.add(topic)
    return topics


def _offsets(text: str | None) -> dict:
    try:
        found = json.loads(text) if text else {}
    except ValueError:  # not a Kafka source's offsets
        return {}
    return found if isinstance(found, dict) else {}


def summary_of(entry: dict) -> BatchSummary:
    counts = entry.get("counts") or {}
    end = from_json(entry.get("end_offsets") or {})
    planned = from_json(entry.get("start_offsets") or {})
    # a partition the ledger has no planned start for (the batch's checkpoint entry was gone)
    start: dict = {t: {p: planned.get(t, {}).get(p, "?") for p in parts} for t, parts in end.items()}
    return BatchSummary(read=int(counts.get("read", 0)), unique=int(counts.get("unique", 0)),
                        by_stage={s: int(counts.get(s, 0)) for s in STAGES},
                        start_offsets=start, end_offsets=end, bounds={})


def merge_result(metrics: dict) -> MergeResult:
    def figure(name: str) -> int:
        return int(metrics.get(name) or 0)

    return MergeResult(inserted=figure("numTargetRowsInserted"), updated=figure("numTargetRowsUpdated"),
                       deleted=figure("numTargetRowsDeleted"))


class WorkerError(Exception):
    """What failed a batch in the worker beside the server, as its traceback's last line said."""


def worker_failure(spark, pipeline: Pipeline, error: BaseException) -> tuple[int | None, dict | None, BaseException]:
    """(batch id, its planned end offsets, the cause) of a query on Connect that failed in a
    batch. The batch is the last one planned (Spark writes its offsets before running it and
    commits them only once it succeeds); the cause is the worker's exception, not the
    traceback's first lines that the query's error starts with."""
    state = read_state(spark, pipeline.checkpoint)
    batch_id = state.planned_batch
    offsets = None if batch_id is None else planned_end(spark, pipeline.checkpoint, batch_id)
    cause = WorkerError(worker_message(str(error)))
    cause.__cause__ = error
    return batch_id, offsets, cause


def worker_message(text: str) -> str:
    """The exception line (`Type: message`, and what follows it) of the Python traceback in a
    Connect query's error; the text as it is when it holds none."""
    _, found, traceback = text.partition("Traceback (most recent call last):")
    if not found:
        return text
    lines = traceback.split("\n")
    # the exception line is the last one at the left margin before any JVM part
    jvm = next((n for n, line in enumerate(lines) if line.startswith("JVM stacktrace")), len(lines))
    named = [n for n, line in enumerate(lines[:jvm]) if line and not line[0].isspace()]
    return "\n".join(lines[named[0]:jvm]).strip() if named else text
