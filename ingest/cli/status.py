"""`ingest status`: where a pipeline stands, per partition, from Kafka, the
checkpoint and the Delta log (ingest/audit/status.py reads them)."""

from __future__ import annotations

from typing import Any

from ingest.cli.options import load_one, pipeline_file, session
from ingest.cli.output import CHECK_FAILED, OK, audit_figure, render_per_table, to_json
from ingest.spec.settings import mask
from ingest.spec.template import is_per_topic

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser(
        "status", parents=parents, help="where a pipeline stands, per partition",
        description="Per partition: Kafka's earliest and end offsets, the checkpoint's offset, the "
        "offset recorded in the Delta log and the lag (end minus where the next run starts); the "
        "last batch; and what any disagreement means. Exit 1 when the broker does not answer or "
        "a warning says data may be at risk.")
    pipeline_file(command)
    command.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from ingest.audit.status import status
    pipeline = load_one(args).pipeline
    if is_per_topic(pipeline):
        from ingest.audit.per_table import status_per_table

        report: Any = status_per_table(session(args, "ingest-status"), pipeline)
        text = to_json(report.to_dict()) if args.json else render_per_table(report, render_status)
    else:
        report = status(session(args, "ingest-status"), pipeline)
        text = to_json(report.to_dict()) if args.json else render_status(report)
    print(mask(text, pipeline.secret_values))
    return OK if report.ok else CHECK_FAILED


def render_status(report) -> str:
    shown = audit_figure
    header = ("partition", "earliest", "end", "checkpoint", "delta log", "lag")
    rows = [(f"{p.topic}/{p.partition}", *map(shown, (p.earliest, p.end, p.checkpoint, p.delta_log, p.lag)))
            for p in report.partitions]
    width = max([len(header[0])] + [len(row[0]) for row in rows])
    lines = [f"status {report.pipeline}: {'OK' if report.ok else 'ATTENTION'}"]
    lines += [f"  {row[0]:<{width}}" + "".join(f"{cell:>12}" for cell in row[1:])
              for row in [header] + rows]
    lines.append(f"  checkpoint  {report.checkpoint}: " + (
        f"batch {report.last_committed_batch} committed" if report.last_committed_batch is not None
        else "no committed batch"))
    lines.append(f"  target      {report.target}" + ("" if report.table_exists else ": does not exist yet"))
    b = report.last_batch
    if b is not None:
        lines.append(f"  last batch  {b.batch_id} at {b.timestamp} (Delta version {b.version}): "
                     f"{shown(b.source_rows)} uids merged, {shown(b.inserted)} inserted, "
                     f"{shown(b.updated)} updated, {b.dead_letters} dead letters")
    if report.kafka_error:
        lines.append(f"error: {report.kafka_error}")
    lines += [f"{f.level}: {f.text}" for f in report.findings]
    return "\n".join(lines)
