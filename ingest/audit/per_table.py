"""One table's audit (`verify_table`: the change audit for `cdc`, the record audit otherwise),
and `status` and `verify` of a pipeline with a table per topic: one report per table.

Each table is audited as the single-table pipeline it is: the pipeline rendered
for its topics (`spec.template.for_topic`), subscribed to those topics only.
The topics are the ones the pattern matches now, plus any the checkpoint has
read (a topic deleted since still has its table to account for).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ingest.audit.status import WARNING, Finding, StatusReport, status
from ingest.audit.verify import VerifyReport, verify
from ingest.audit.verify_changes import ChangesReport, verify_changes
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.kafka.checkpoint import read_state
from ingest.spec import template
from ingest.spec.model import Pipeline


@dataclass(frozen=True)
class TableReport:
    table: str
    topics: tuple[str, ...]
    report: StatusReport | VerifyReport | ChangesReport


@dataclass(frozen=True)
class PerTableReport:
    pipeline: str
    tables: tuple[TableReport, ...]
    kafka_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kafka_error is None and all(t.report.ok for t in self.tables)

    def to_dict(self) -> dict:
        return {"pipeline": self.pipeline, "ok": self.ok, "kafka_error": self.kafka_error,
                "tables": [{"table": t.table, "topics": list(t.topics), **t.report.to_dict()}
                           for t in self.tables]}


def table_pipelines(pipeline: Pipeline, topics) -> list[tuple[str, tuple[str, ...], Pipeline]]:
    """(table, its topics, the single-table pipeline of those topics), by table."""
    found = []
    for table, group in sorted(template.tables_of(pipeline, topics).items()):
        one = template.for_topic(pipeline, group[0])
        kafka = replace(one.source.kafka, topics=tuple(group), pattern=None)
        found.append((table, tuple(group), replace(one, source=replace(one.source, kafka=kafka))))
    return found


def _topics(spark, pipeline: Pipeline) -> tuple[list[str], str | None]:
    read = set((read_state(spark, pipeline.checkpoint).committed_offsets or {}).keys())
    try:
        return sorted(read | set(kafka_admin.watermarks(pipeline.source.kafka))), None
    except IngestError as error:  # status still reports what the checkpoint and tables say
        return sorted(read), str(error)


def status_per_table(spark, pipeline: Pipeline) -> PerTableReport:
    topics, kafka_error = _topics(spark, pipeline)
    tables = []
    for table, group, one in table_pipelines(pipeline, topics):
        report = status(spark, one, only_topics=group)
        tables.append(TableReport(table, group, _nothing_read_yet(report)))
    return PerTableReport(pipeline.name, tuple(tables), kafka_error)


def _nothing_read_yet(report: StatusReport) -> StatusReport:
    """A topic that has had no record yet has no table yet: that is no removed table."""
    if report.table_exists or any((p.checkpoint or 0) > (p.earliest or 0) for p in report.partitions):
        return report
    findings = tuple(Finding("note", "no record of this table's topics has been read yet: the table "
                                     "is created with its first data")
                     if f.level == WARNING and "does not exist but the checkpoint does" in f.text else f
                     for f in report.findings)
    return replace(report, findings=findings)


def verify_table(spark, pipeline: Pipeline, only_topics: tuple[str, ...] | None = None
                 ) -> VerifyReport | ChangesReport:
    """One table by the audit that fits it: `only_topics` for a table of a per-topic
    pipeline, whose checkpoint and dead letters may be shared with the other tables."""
    if pipeline.cdc is not None:
        return verify_changes(spark, pipeline, only_topics)
    return verify(spark, pipeline, only_topics)


def verify_per_table(spark, pipeline: Pipeline) -> PerTableReport:
    """Each table by the audit that fits it (`verify_table`: cdc or not)."""
    kafka_admin.check_reachable(pipeline.source.kafka)
    topics, _ = _topics(spark, pipeline)
    tables = [TableReport(table, group, verify_table(spark, one, only_topics=group))
              for table, group, one in table_pipelines(pipeline, topics)]
    return PerTableReport(pipeline.name, tuple(tables))
