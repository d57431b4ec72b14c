"""The `ingest` command line: the only module that reads argv, prints or exits.

One `add_<command>` function declares a subcommand's arguments and one
`<command>_command(args) -> int` runs it; to add a subcommand, write the pair
and list the first in SUBCOMMANDS. Exit codes: 0 ok, 1 a check failed,
2 bad input (spec, arguments, files).
"""

from __future__ import annotations

import argparse
import glob
import sys
from dataclasses import dataclass, field

from ingest.errors import Problem, SpecErrors
from ingest.plan import render_plan
from ingest.settings import DEFAULT_ENV, load_settings
from ingest.spec_loader import Loaded, check_unique, read_pipeline

OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2
DEFAULT_PIPELINES = "pipelines/*.yaml"
# Parsing needs no UI and one core. No extra JVM options: the default ones make
# log4j print a warning on stdout, which is validate's report.
VALIDATE_SPARK_CONF = {"spark.ui.enabled": "false", "spark.master": "local[1]",
                       "spark.driver.extraJavaOptions": ""}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits on --help (0) and on bad arguments (2)
        return int(stop.code or 0)
    try:
        return args.run(args)
    except SpecErrors as errors:  # a conf file, or a spec a command could not load
        return _print_errors(errors.problems, errors.problems[0].file or "the input")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ingest", description="Exactly-once ingestion from Kafka into Delta Lake, declared in YAML.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(commands, _environment_options())
    return parser


def _environment_options() -> argparse.ArgumentParser:
    """--env / --conf-dir, shared by every subcommand that reads a pipeline."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--env", default=DEFAULT_ENV,
                         help="environment: reads conf/ENV.yaml for ${VAR} values (default: local)")
    options.add_argument("--conf-dir", default=None, metavar="DIR",
                         help="folder of ENV.yaml files (default: $INGEST_CONF_DIR or ./conf)")
    return options


# --- validate -------------------------------------------------------------------


def add_validate(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser("validate", parents=[environment], help="check pipeline files",
                                  description="Check pipelines; every error names file, line, "
                                  "key path and what was expected. Exit 2 on any error.")
    command.add_argument("files", nargs="*", metavar="FILE",
                         help=f"pipeline files (default: {DEFAULT_PIPELINES})")
    command.add_argument("--no-spark", action="store_true",
                         help="skip the checks of schema DDL and transform SQL with Spark (fast)")
    command.set_defaults(run=validate_command)


@dataclass
class _Checked:
    """One file's outcome: its pipeline when it loaded, and every problem and warning."""

    file: str
    loaded: Loaded | None = None
    problems: list[Problem] = field(default_factory=list)


def validate_command(args) -> int:
    files = args.files or sorted(glob.glob(DEFAULT_PIPELINES))
    if not files:
        print(f"no pipeline files: none match {DEFAULT_PIPELINES}; expected FILE arguments")
        return BAD_INPUT
    settings = load_settings(args.env, args.conf_dir)
    checked = [_load(file, settings) for file in files]
    if not args.no_spark:
        _spark_pass(checked)
    _cross_file(checked)
    return max(_report(one) for one in checked)


def _load(file: str, settings) -> _Checked:
    try:
        loaded = read_pipeline(file, settings=settings)
    except SpecErrors as errors:
        return _Checked(file, None, list(errors.problems))
    return _Checked(file, loaded, list(loaded.warnings))


def _spark_pass(checked: list[_Checked]) -> None:
    """Spark's parser on DDL and SQL, for the files that passed the first pass."""
    pending = [one for one in checked if one.loaded is not None]
    if not pending:
        return
    try:
        from ingest.session import get_session
        from ingest.sql_check import check_sql

        spark = get_session("ingest-validate", conf=VALIDATE_SPARK_CONF)
    except Exception as error:  # no pyspark, no Java: say so, keep the first pass's verdict
        print(f"note: schema and SQL checks skipped: no Spark session ({error}); "
              "use --no-spark to skip them on purpose", file=sys.stderr)
        return
    for one in pending:
        one.problems += one.loaded.place(check_sql(one.loaded.pipeline, spark))


def _cross_file(checked: list[_Checked]) -> None:
    loaded = [one.loaded for one in checked if one.loaded is not None]
    by_file = {one.file: one for one in checked}
    for problem in check_unique(loaded):
        by_file[problem.file].problems.append(problem)


def _report(one: _Checked) -> int:
    errors = [problem for problem in one.problems if not problem.warning]
    if not errors:
        for warning in sorted(one.problems, key=_line):
            print(warning.render())
        print(f"OK {one.file}")
        return OK
    return _print_errors(one.problems, one.file)


def _print_errors(problems, file: str) -> int:
    for problem in sorted(problems, key=_line):
        print(problem.render())
    count = sum(1 for problem in problems if not problem.warning)
    print(f"{count} error{'s' if count != 1 else ''} in {file}")
    return BAD_INPUT


def _line(problem: Problem):
    return (problem.line or 0, problem.path)


# --- plan -----------------------------------------------------------------------


def add_plan(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser("plan", parents=[environment], help="show what a pipeline will run",
                                  description="Print the resolved pipeline (secrets masked), the "
                                  "Kafka options, the target, the dead-letter table, the "
                                  "transaction id scheme and the MERGE condition.")
    command.add_argument("file", metavar="FILE", help="a pipeline file")
    command.set_defaults(run=plan_command)


def plan_command(args) -> int:
    settings = load_settings(args.env, args.conf_dir)
    loaded = read_pipeline(args.file, settings=settings)
    print(render_plan(loaded, settings), end="")
    return OK


# Other subcommands (run, status, verify, produce, demo, jars) are added here.
SUBCOMMANDS = (add_validate, add_plan)
