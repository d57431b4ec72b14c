"""`ingest validate`: every problem in the pipeline files, each with file, line,
key path and what was expected; Spark's parser on the schema DDL and the
transform SQL when a session can start."""

from __future__ import annotations

import glob
import sys
from dataclasses import dataclass, field

from ingest.cli.options import settings_of
from ingest.cli.output import BAD_INPUT, OK, by_line, print_problems, to_json
from ingest.errors import IngestError, Problem, SpecErrors
from ingest.spec.loader import Loaded, check_unique, load_file
from ingest.spec.template import for_topic, subject_per_topic

# Without pyspark validate still runs its first pass (and says the Spark checks were skipped).
NEEDS_SPARK = False
DEFAULT_PIPELINES = ("pipelines/*.yaml", "pipelines/*.yml")
# Parsing needs no UI and one core.
VALIDATE_SPARK_CONF = {"spark.ui.enabled": "false", "spark.master": "local[1]"}


def add(commands, parents) -> None:
    command = commands.add_parser("validate", parents=parents, help="check pipeline files",
                                  description="Check pipelines; every error names file, line, "
                                  "key path and what was expected. Exit 2 on any error.")
    command.add_argument("files", nargs="*", metavar="FILE",
                         help=f"pipeline files (default: {DEFAULT_PIPELINES})")
    command.add_argument("--no-spark", action="store_true",
                         help="skip the checks of schema DDL and transform SQL with Spark (fast)")
    command.add_argument("--strict", action="store_true",
                         help="fail (exit 2) when the Spark checks could not run (no pyspark or Java)")
    command.add_argument("--json", action="store_true", help="print the findings as JSON")


@dataclass
class _Checked:
    """One file's outcome: its pipeline when it loaded, and every problem and warning."""

    file: str
    loaded: Loaded | None = None
    problems: list[Problem] = field(default_factory=list)


def run(args) -> int:
    files = args.files or sorted(name for pattern in DEFAULT_PIPELINES for name in glob.glob(pattern))
    if not files:
        print(f"no pipeline files: none match {' or '.join(DEFAULT_PIPELINES)}; expected FILE arguments",
              file=sys.stderr)
        return BAD_INPUT
    try:
        settings = settings_of(args)
    except SpecErrors as errors:  # the conf is validate's input too: its findings are the result
        return print_problems(errors.problems, errors.problems[0].file or "the conf")
    checked = [_load(file, settings) for file in files]
    spark_checked = True if args.no_spark else _spark_pass(checked)
    _cross_file(checked)
    if args.strict and not spark_checked:
        print("error: --strict: the schema and SQL checks could not run", file=sys.stderr)
    code = max(_report_json(checked) if args.json else [_report(one) for one in checked])
    return BAD_INPUT if args.strict and not spark_checked else code


def _report_json(checked: list[_Checked]) -> list[int]:
    files = [{"file": one.file, "ok": not _errors(one),
              "problems": [_problem_dict(p) for p in sorted(one.problems, key=by_line)]}
             for one in checked]
    print(to_json({"ok": all(f["ok"] for f in files), "files": files}))
    return [BAD_INPUT if _errors(one) else OK for one in checked]


def _errors(one: _Checked) -> list[Problem]:
    return [problem for problem in one.problems if not problem.warning]


def _problem_dict(problem: Problem) -> dict:
    return {"file": problem.file, "line": problem.line, "path": problem.path, "code": problem.code,
            "message": problem.message, "warning": problem.warning}


def _load(file: str, settings) -> _Checked:
    try:
        loaded = load_file(file, settings=settings)
    except SpecErrors as errors:
        return _Checked(file, None, list(errors.problems))
    return _Checked(file, loaded, list(loaded.warnings))


def _spark_pass(checked: list[_Checked]) -> bool:
    """Spark's parser on DDL and SQL, for the files that passed the first pass;
    False when there was no Spark to ask."""
    pending = [one for one in checked if one.loaded is not None]
    if not pending:
        return True
    try:
        from ingest.platform.session import get_session
        from ingest.spec.sql_check import check_sql

        spark = get_session("ingest-validate", conf=VALIDATE_SPARK_CONF)
    except Exception as error:  # no pyspark, no Java: say so, keep the first pass's verdict
        print(f"note: schema and SQL checks skipped: no Spark session ({error}); "
              "use --no-spark to skip them on purpose", file=sys.stderr)
        return False
    for one in pending:
        payload, problems = _reader_columns(one.loaded.pipeline)
        if not problems:
            problems = check_sql(one.loaded.pipeline, spark, payload)
        one.problems += one.loaded.place(problems)
    return True


def _reader_columns(pipeline) -> tuple[object, list[Problem]]:
    """avro/protobuf: the reader schema's columns from the registry or schema_file."""
    if pipeline.source.format not in ("avro", "protobuf"):
        return None, []
    from ingest.batch.formats.schemas import reader_columns

    # A subject per topic: each listed topic's (a pattern's topics are known only at run
    # time); the transform is then checked by the run, against each topic's own columns.
    per_topic = subject_per_topic(pipeline)
    sources = ([for_topic(pipeline, topic).source for topic in pipeline.source.kafka.topics]
               if per_topic else [pipeline.source])
    try:
        columns = [reader_columns(source) for source in sources]
    except IngestError as error:
        key = "source.registry" if pipeline.source.registry else "source.schema_file"
        return None, [Problem("reader_schema", key, f"{error}; expected a reader schema "
                              "whose fields can be the payload columns")]
    return (None if per_topic else columns[0]), []


def _cross_file(checked: list[_Checked]) -> None:
    loaded = [one.loaded for one in checked if one.loaded is not None]
    by_file = {one.file: one for one in checked}
    for problem in check_unique(loaded):
        by_file[problem.file].problems.append(problem)


def _report(one: _Checked) -> int:
    if not _errors(one):
        for warning in sorted(one.problems, key=by_line):
            print(warning.render())
        print(f"OK {one.file}")
        return OK
    return print_problems(one.problems, one.file)
