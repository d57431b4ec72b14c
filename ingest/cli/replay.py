"""`ingest replay`: a range of the topic processed again into the same target,
under the replay's own checkpoint and transaction ids."""

from __future__ import annotations

import sys

from ingest.cli.options import load_one, offsets_json, pipeline_file, session, timestamp_ms
from ingest.cli.output import OK
from ingest.spec.settings import mask

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser(
        "replay", parents=parents, help="reprocess a range of the topic into the same target",
        description="Reprocess records the pipeline has already committed, e.g. after a fix to a "
        "transform, under the replay's own checkpoint and transaction ids; the pipeline's checkpoint "
        "is not touched. Idempotent by uid (insert_only: a uid already there is a no-op; upsert: "
        "the later order_by wins). Records already in the dead letters are not replayed.")
    pipeline_file(command)
    start = command.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-timestamp", metavar="T", type=timestamp_ms,
                       help="ISO 8601 (UTC unless it has an offset) or Unix milliseconds")
    start.add_argument("--from-offsets", metavar="JSON", type=offsets_json,
                       help='{"topic": {"0": 120, "1": 80}}; partitions not named are not replayed')
    command.add_argument("--to-timestamp", metavar="T", type=timestamp_ms,
                         help="stop before records of this time (default: where the pipeline is)")


def run(args) -> int:
    from ingest.stream.replay import replay, resolve_range

    pipeline = load_one(args).pipeline
    secrets = pipeline.secret_values
    spark = session(args, "ingest-replay")
    span = resolve_range(spark, pipeline, args.from_timestamp, args.to_timestamp, args.from_offsets)
    print(f"note: replaying {span.records} offsets: {span.describe()}", file=sys.stderr)
    reports = replay(spark, pipeline, span, on_report=lambda r: print(mask(r.line(), secrets), flush=True))
    inserted = sum(r.merged.inserted for r in reports)
    updated = sum(r.merged.updated for r in reports)
    print(f"{pipeline.name}: replayed {sum(r.summary.read for r in reports)} records in {len(reports)} "
          f"batch(es): inserted {inserted}, updated {updated}")
    return OK
