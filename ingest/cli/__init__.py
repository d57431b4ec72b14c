"""The `ingest` command line: the only package that reads argv, prints or exits.

A command is a module here with `add(commands, parents)` (its arguments),
`run(args) -> int` (its exit code) and `NEEDS_SPARK`; to add one, write the
module and list it in COMMANDS. `main` does what every command shares, once:
it refuses a command that needs Spark where pyspark is missing, and maps what a
command raises to an exit code, masking the pipeline's secrets. Exit codes:
0 ok, 1 a check failed, 2 bad input (spec, arguments, files).
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from ingest.cli import broker, demo, maintain, plan, produce, replay, run, status, validate, verify
from ingest.cli.options import environment
from ingest.cli.output import BAD_INPUT, CHECK_FAILED, OK, print_problems
from ingest.errors import IngestError, SpecErrors
from ingest.platform.connect import ConnectUnsupported, server_lost, unreachable
from ingest.spec.settings import mask

__all__ = ["BAD_INPUT", "CHECK_FAILED", "COMMANDS", "OK", "build_parser", "main"]

# In the order `ingest --help` lists them.
COMMANDS: dict[str, ModuleType] = {
    "validate": validate, "plan": plan, "run": run, "produce": produce, "demo": demo,
    "status": status, "verify": verify, "broker": broker, "maintain": maintain, "replay": replay,
}
NO_SPARK = ("pyspark is not installed; expected `pip install 'ingest[spark]'` "
            "(on Databricks it is there already)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits on --help (0) and on bad arguments (2)
        return int(stop.code or 0)
    command = COMMANDS[args.command]
    if command.NEEDS_SPARK and not spark_installed():
        print(f"error: {NO_SPARK}", file=sys.stderr)
        return BAD_INPUT
    args.secrets = frozenset()  # a command that loads a pipeline puts its secrets here
    try:
        return command.run(args)
    except SpecErrors as errors:  # a conf file, or a spec a command could not load or start
        return print_problems(errors.problems, errors.problems[0].file or "the input", sys.stderr,
                              secrets=args.secrets)
    except ConnectUnsupported as error:  # asked of Spark Connect, which cannot do it: a usage error
        print(f"error: {mask(str(error), args.secrets)}", file=sys.stderr)
        return BAD_INPUT
    except IngestError as error:  # broker down, bad credentials, retention gap, already running
        print(f"error: {mask(str(error), args.secrets)}", file=sys.stderr)
        return CHECK_FAILED
    except Exception as error:  # a Spark Connect server that stopped answering: one line, not gRPC's dump
        if not server_lost(error):
            raise
        print(f"error: the Spark Connect server stopped answering ({mask(unreachable(error), args.secrets)})",
              file=sys.stderr)
        return CHECK_FAILED


def spark_installed() -> bool:
    """Checked before any work, so a missing pyspark is a message, not an ImportError's traceback."""
    try:
        import delta  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    from ingest import __version__

    parser = argparse.ArgumentParser(
        prog="ingest", description="Exactly-once ingestion from Kafka into Delta Lake, declared in YAML.")
    parser.add_argument("--version", action="version", version=f"ingest {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        command.add(commands, [environment()])
    return parser
