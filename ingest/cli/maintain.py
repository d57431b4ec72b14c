"""`ingest maintain`: OPTIMIZE and VACUUM a pipeline's tables, safe while it runs."""

from __future__ import annotations

import sys

from ingest.cli.options import load_one, pipeline_file, session
from ingest.cli.output import OK, to_json
from ingest.spec.settings import mask

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser(
        "maintain", parents=parents, help="compact and vacuum a pipeline's tables",
        description="OPTIMIZE and/or VACUUM the target and the dead letters, safe while the "
        "pipeline runs. VACUUM keeps files for the longest of maintenance.vacuum_retain and the "
        "table's delta.deletedFileRetentionDuration. With hard deletes, the delete log too: "
        "VACUUM first purges the deletes logged longer ago than maintenance.delete_log_retain. "
        "Where deletion vectors are on, OPTIMIZE is preceded by REORG TABLE ... APPLY (PURGE). "
        "With neither flag, both run. On S3 with Delta's single-driver log store, refused unless "
        "--pipeline-stopped (docs/cluster.md#tables-on-s3).")
    pipeline_file(command)
    command.add_argument("--optimize", action="store_true", help="compact small files")
    command.add_argument("--vacuum", action="store_true", help="delete files no version still needs")
    command.add_argument("--zorder", action="store_true", help="with --optimize: Z-order the target by _uid")
    command.add_argument("--pipeline-stopped", action="store_true",
                         help="the pipeline is not running: allows maintenance of tables on S3 without a "
                         "multi-writer log store, where a second driver can lose a commit")
    command.add_argument("--json", action="store_true", help="results as JSON")


def run(args) -> int:
    from dataclasses import asdict

    from ingest.errors import SpecErrors
    from ingest.platform.session import on_databricks
    from ingest.stream.log_store import second_driver_problem
    from ingest.stream.maintenance import maintain
    from ingest.stream.store_lease import conditional_create

    pipeline = load_one(args).pipeline
    both = not (args.optimize or args.vacuum)
    spark = session(args, "ingest-maintain")
    problem = second_driver_problem(pipeline, lambda key: spark.conf.get(key, None), on_databricks(),
                                    lambda location: conditional_create(spark, location))
    if problem is not None and not args.pipeline_stopped:
        raise SpecErrors([problem])
    done = maintain(spark, pipeline, optimize=args.optimize or both,
                    vacuum=args.vacuum or both, zorder=args.zorder)
    if not done:
        print(f"note: {pipeline.name}: no table to maintain yet", file=sys.stderr)
    text = to_json([asdict(one) for one in done]) if args.json else "\n".join(one.line() for one in done)
    print(mask(text, pipeline.secret_values))
    return OK
