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
from typing import Any

from ingest.errors import IngestError, Problem, SpecErrors
from ingest.cli.plan import plan_document, render_plan
from ingest.spec.loader import Loaded, check_unique, read_pipeline
from ingest.spec.settings import DEFAULT_ENV, load_settings, mask
from ingest.spec.template import for_topic, is_per_topic, subject_per_topic

OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2
DEFAULT_PIPELINES = ("pipelines/*.yaml", "pipelines/*.yml")
NO_SPARK = ("pyspark is not installed; expected `pip install 'ingest[spark]'` "
            "(on Databricks it is there already)")
# Parsing needs no UI and one core.
VALIDATE_SPARK_CONF = {"spark.ui.enabled": "false", "spark.master": "local[1]"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse exits on --help (0) and on bad arguments (2)
        return int(stop.code or 0)
    try:
        return args.run(args)
    except SpecErrors as errors:  # a conf file, or a spec a command could not load
        return _print_errors(errors.problems, errors.problems[0].file or "the input", sys.stderr)
    except MissingSpark:
        print(f"error: {NO_SPARK}", file=sys.stderr)
        return BAD_INPUT


class MissingSpark(Exception):
    """A command that needs Spark, where pyspark or delta-spark is not installed."""


def _need_spark() -> None:
    """Fail before any work when pyspark is absent: a message, not an ImportError's traceback."""
    try:
        import delta  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        raise MissingSpark() from None


def build_parser() -> argparse.ArgumentParser:
    from ingest import __version__

    parser = argparse.ArgumentParser(
        prog="ingest", description="Exactly-once ingestion from Kafka into Delta Lake, declared in YAML.")
    parser.add_argument("--version", action="version", version=f"ingest {__version__}")
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
    command.add_argument("--strict", action="store_true",
                         help="fail (exit 2) when the Spark checks could not run (no pyspark or Java)")
    command.add_argument("--json", action="store_true", help="print the findings as JSON")
    command.set_defaults(run=validate_command)


@dataclass
class _Checked:
    """One file's outcome: its pipeline when it loaded, and every problem and warning."""

    file: str
    loaded: Loaded | None = None
    problems: list[Problem] = field(default_factory=list)


def validate_command(args) -> int:
    files = args.files or sorted(name for pattern in DEFAULT_PIPELINES for name in glob.glob(pattern))
    if not files:
        print(f"no pipeline files: none match {' or '.join(DEFAULT_PIPELINES)}; expected FILE arguments",
              file=sys.stderr)
        return BAD_INPUT
    try:
        settings = load_settings(args.env, args.conf_dir)
    except SpecErrors as errors:  # the conf is validate's input too: its findings are the result
        return _print_errors(errors.problems, errors.problems[0].file or "the conf")
    checked = [_load(file, settings) for file in files]
    spark_checked = True if args.no_spark else _spark_pass(checked)
    _cross_file(checked)
    if args.strict and not spark_checked:
        print("error: --strict: the schema and SQL checks could not run", file=sys.stderr)
    code = max(_report_json(checked) if args.json else [_report(one) for one in checked])
    return BAD_INPUT if args.strict and not spark_checked else code


def _report_json(checked: list[_Checked]) -> list[int]:
    files = [{"file": one.file, "ok": not _errors(one),
              "problems": [_problem_dict(p) for p in sorted(one.problems, key=_line)]}
             for one in checked]
    print(_json({"ok": all(f["ok"] for f in files), "files": files}))
    return [BAD_INPUT if _errors(one) else OK for one in checked]


def _errors(one: _Checked) -> list[Problem]:
    return [problem for problem in one.problems if not problem.warning]


def _problem_dict(problem: Problem) -> dict:
    return {"file": problem.file, "line": problem.line, "path": problem.path, "code": problem.code,
            "message": problem.message, "warning": problem.warning}


def _load(file: str, settings) -> _Checked:
    try:
        loaded = read_pipeline(file, settings=settings)
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
    from ingest.batch.schema_decode import reader_columns

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
        for warning in sorted(one.problems, key=_line):
            print(warning.render())
        print(f"OK {one.file}")
        return OK
    return _print_errors(one.problems, one.file)


def _print_errors(problems, file: str, stream=None) -> int:
    """validate's findings are its result (stdout); another command's are diagnostics (stderr)."""
    for problem in sorted(problems, key=_line):
        print(problem.render(), file=stream)
    count = sum(1 for problem in problems if not problem.warning)
    print(f"{count} error{'s' if count != 1 else ''} in {file}", file=stream)
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
    command.add_argument("--json", action="store_true", help="print the plan as JSON")
    command.set_defaults(run=plan_command)


def plan_command(args) -> int:
    settings = load_settings(args.env, args.conf_dir)
    loaded = read_pipeline(args.file, settings=settings)
    if args.json:
        print(_json(plan_document(loaded, settings)))
    else:
        print(render_plan(loaded, settings), end="")
    return OK


# --- run ------------------------------------------------------------------------


def add_run(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser("run", parents=[environment], help="run pipelines",
                                  description="Run pipelines: one Spark application, one streaming "
                                  "query each, as each pipeline's trigger says: the default "
                                  "(available_now) reads what the topics hold, then stops; "
                                  "trigger.processing_time runs until stopped. SIGTERM or Ctrl-C "
                                  "stops them cleanly. Exit 1 when a query fails, naming the "
                                  "pipeline, batch and offsets.")
    command.add_argument("files", nargs="+", metavar="FILE", help="pipeline files")
    command.add_argument("--once", action="store_true",
                         help="process what is available now, then exit, whatever the "
                         "pipeline's trigger (the default trigger does this already)")
    command.add_argument("--no-preflight", action="store_true",
                         help="skip the broker check and retention guard done with the Python Kafka "
                         "client (for a login only Spark's Java client speaks, e.g. AWS MSK IAM)")
    command.add_argument("--fail-fast", action="store_true",
                         help="stop every pipeline when one fails (by default the others go on; "
                         "the exit code is 1 either way)")
    command.set_defaults(run=run_command)


def run_command(args) -> int:
    settings = load_settings(args.env, args.conf_dir)
    loaded = [read_pipeline(file, settings=settings) for file in args.files]
    problems = check_unique(loaded)
    if problems:
        return _print_errors(problems, problems[0].file, sys.stderr)
    _need_spark()
    for one in loaded:
        for warning in one.warnings:
            print(warning.render(), file=sys.stderr)
    pipelines = [one.pipeline for one in loaded]
    secrets = frozenset().union(*(p.secret_values for p in pipelines))
    from ingest.batch import faults
    from ingest.errors import IngestError

    if faults.warning():
        print(f"{'!' * 78}\nWARNING: {faults.warning()}\n{'!' * 78}", file=sys.stderr, flush=True)

    if args.no_preflight:
        print("warning: --no-preflight: no broker check before Spark starts and no retention guard "
              "from ingest; Spark's Kafka client still stops on lost offsets (unless "
              "allow_data_loss), and a broker that does not answer shows only as a slow, failed query",
              file=sys.stderr)
    try:
        return _supervise(pipelines, args.once, secrets, preflight=not args.no_preflight,
                          fail_fast=args.fail_fast)
    except SpecErrors as error:  # what validate refuses, found again at start
        print(mask(error.render(), secrets), file=sys.stderr)
        return BAD_INPUT
    except IngestError as error:  # broker down, bad credentials, retention gap, already running
        print(f"error: {mask(str(error), secrets)}", file=sys.stderr)
        return CHECK_FAILED


def _supervise(pipelines, once: bool, secrets, preflight: bool = True, fail_fast: bool = False) -> int:
    import signal
    import threading

    from ingest.platform.session import SessionStart
    from ingest.run.supervisor import Supervisor

    progress = _ProgressPrinter(secrets)
    supervisor = Supervisor(pipelines, once, on_report=progress.batch, on_note=progress.note,
                            preflight=preflight, fail_fast=fail_fast)
    session = SessionStart("ingest-run")  # the JVM starts while the leases and the preflight run
    supervisor.claim()  # needs no Spark: a second copy or a dead broker fails in a second
    stopped_by = []

    def stop(signum, _frame):
        stopped_by.append(signum)
        supervisor.request_stop()

    # Python lets only the main thread take signals; elsewhere (a notebook cell, a
    # wheel task's thread) the caller's own interrupt handling applies.
    handled = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
    previous = {s: signal.signal(s, stop) for s in handled}
    try:
        supervisor.start(session.result())
        outcomes = supervisor.wait()
    finally:
        supervisor.release()
        for number, handler in previous.items():
            signal.signal(number, handler)
    progress.finish()
    failed = [o for o in outcomes if o.error]
    for outcome in failed:
        print(f"error: {mask(outcome.error, secrets)}", file=sys.stderr)
    for outcome in outcomes:
        if not outcome.error:
            state = "stopped" if stopped_by else "done"
            print(f"{outcome.pipeline}: {state} after {outcome.batches} batch(es)")
    if failed:
        return CHECK_FAILED
    return 130 if signal.SIGINT in stopped_by else OK


class _ProgressPrinter:
    """Batch lines on stdout; catch-up progress as a live bar on a terminal, else plain lines."""

    def __init__(self, secrets):
        self.secrets = secrets
        self.live = sys.stderr.isatty()
        self._bar_shown = False

    def note(self, text: str) -> None:
        self._clear()
        print(f"note: {mask(text, self.secrets)}", file=sys.stderr)

    def batch(self, report, catch_up) -> None:
        self._clear()
        print(mask(report.line(), self.secrets), flush=True)
        if catch_up.far_behind:
            if self.live:
                print(catch_up.line(), end="\r", file=sys.stderr, flush=True)
                self._bar_shown = True
            else:
                print(f"progress: {catch_up.line()}", file=sys.stderr, flush=True)

    def _clear(self) -> None:
        if self._bar_shown:
            print(" " * 100, end="\r", file=sys.stderr)
            self._bar_shown = False

    def finish(self) -> None:
        self._clear()


# --- produce --------------------------------------------------------------------


def add_produce(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "produce", parents=[environment], help="load a JSON Lines file into a topic",
        description="Send each line of a JSON Lines file (one JSON object per line) to a topic "
        "with an idempotent producer (acks=all), stamping a time-ordered uid (UUIDv7) in a "
        "header. A bad line stops everything before anything is sent, unless "
        "--on-bad-line skip. Exit 1 if any record was not delivered, 2 on bad input.")
    command.add_argument("file", metavar="FILE.jsonl", help="one JSON object per line")
    command.add_argument("--topic", required=True, help="the topic to write to (must exist)")
    command.add_argument("--bootstrap", metavar="HOST:PORT",
                         help="the brokers (default: KAFKA_BOOTSTRAP from the environment or conf/ENV.yaml)")
    command.add_argument("--key-field", metavar="FIELD", help="send this payload field as the Kafka key")
    command.add_argument("--uid-header", default="message-id", metavar="NAME",
                         help="the header that carries the uid (default: message-id)")
    command.add_argument("--uid-field", metavar="FIELD",
                         help="take the uid from this payload field instead of a new UUIDv7")
    command.add_argument("--transactional", action="store_true",
                         help="send in a transaction: readers see all of it or none of it")
    command.add_argument("--transaction-size", type=_positive_int, metavar="N",
                         help="with --transactional: one transaction per N records (default: the whole file)")
    command.add_argument("--on-bad-line", choices=("abort", "skip"), default="abort",
                         help="abort (default): send nothing if a line is bad; skip: send the others")
    command.add_argument("-X", dest="client_options", action="append", default=[], metavar="KEY=VALUE",
                         help="a librdkafka producer setting, e.g. -X security.protocol=SASL_SSL (repeatable)")
    command.add_argument("--format", choices=("json", "avro", "protobuf"), default="json",
                         help="json (default): each line as it is; avro, protobuf: each line encoded "
                         "with --schema")
    command.add_argument("--schema", metavar="FILE",
                         help="with --format avro: the Avro schema (.avsc); protobuf: the .proto file")
    command.add_argument("--message", metavar="NAME",
                         help="with --format protobuf: the message type, e.g. shop.Order; each line "
                         "in protobuf's JSON mapping")
    command.add_argument("--registry", metavar="URL",
                         help="with --format avro or protobuf: a Schema Registry (user:password@ in "
                         "the URL for basic auth); records in the Confluent wire format, the schema "
                         "registered under TOPIC-value. Without it: plain records, as "
                         "source.schema_file reads")
    command.set_defaults(run=produce_command)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _encoder(args):
    from ingest.kafka import encoders

    if args.format == "protobuf":
        return encoders.protobuf_encoder(args.schema, args.message, args.topic, args.registry)
    return encoders.avro_encoder(args.schema, args.topic, args.registry)


def produce_command(args) -> int:
    import os

    from ingest.kafka import produce
    from ingest.spec.settings import lookup

    config = _client_options(args.client_options)
    if config is None:
        return BAD_INPUT
    bootstrap = args.bootstrap or lookup(load_settings(args.env, args.conf_dir), "KAFKA_BOOTSTRAP",
                                         os.environ).value
    if not bootstrap:
        print("no brokers: give --bootstrap HOST:PORT, or set KAFKA_BOOTSTRAP "
              f"(environment or conf/{args.env}.yaml)", file=sys.stderr)
        return BAD_INPUT
    if args.transaction_size and not args.transactional:
        print("--transaction-size needs --transactional", file=sys.stderr)
        return BAD_INPUT
    encoded = args.format in ("avro", "protobuf")
    if encoded != bool(args.schema) or (args.registry and not encoded) \
            or (args.format == "protobuf") != bool(args.message):
        print("--format avro needs --schema FILE.avsc, --format protobuf --schema FILE.proto and "
              "--message NAME (and --registry URL for the Confluent wire format); --schema and "
              "--registry go with those formats only, --message with protobuf only", file=sys.stderr)
        return BAD_INPUT
    try:
        encode = _encoder(args) if encoded else None
    except Exception as error:  # unreadable, does not compile, or not a schema (the libraries' own errors)
        print(f"cannot use the schema {args.schema}: {getattr(error, 'strerror', None) or error}",
              file=sys.stderr)
        return BAD_INPUT
    options = produce.Options(args.topic, args.uid_header, args.uid_field, args.key_field,
                              args.transactional, args.transaction_size, args.on_bad_line, encode)
    progress = _ProduceProgress(sys.stderr)
    try:
        summary = produce.produce_file(args.file, options, {**config, "bootstrap.servers": bootstrap},
                                       on_progress=progress.show)
    except OSError as error:
        print(f"cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return BAD_INPUT
    except produce.BadLines as bad:
        _print_bad_lines(bad.file, bad.bad_lines)
        print(f"{len(bad.bad_lines)} bad line(s) in {bad.file}; nothing was sent "
              "(--on-bad-line skip sends the good ones)")
        return BAD_INPUT
    except produce.ProduceError as error:
        progress.clear()
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT if isinstance(error, produce.TopicNotFound) else CHECK_FAILED
    except KeyboardInterrupt:
        progress.clear()
        print("interrupted: records already sent stay in the topic; an open transaction was aborted",
              file=sys.stderr)
        return 130
    progress.clear()
    return _print_produce_summary(summary)


def _client_options(pairs: list[str]) -> dict[str, str] | None:
    config = {}
    for number, pair in enumerate(pairs, start=1):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():  # the text is not echoed: it may hold a password
            print(f"-X option {number}: expected KEY=VALUE", file=sys.stderr)
            return None
        config[key.strip()] = value
    return config


def _print_bad_lines(file: str, bad_lines, limit: int = 20) -> None:
    for bad in bad_lines[:limit]:
        print(f"{file}:{bad.line}: {bad.reason}")
    if len(bad_lines) > limit:
        print(f"... and {len(bad_lines) - limit} more")


def _print_produce_summary(summary) -> int:
    rate = summary.sent / summary.seconds if summary.seconds > 0 else 0.0
    txns = f", {summary.transactions} transaction(s) committed" if summary.transactions else ""
    print(f"{summary.file} -> {summary.topic}: {summary.delivered:,} of {summary.records:,} record(s) "
          f"delivered, {summary.failed:,} failed{txns}, {summary.seconds:.1f}s ({rate:,.0f} records/s)")
    if summary.bad_lines:
        print(f"skipped {len(summary.bad_lines)} bad line(s):")
        _print_bad_lines(summary.file, summary.bad_lines)
    for error in summary.errors:
        print(f"error: {error}", file=sys.stderr)
    return OK if summary.ok else CHECK_FAILED


class _ProduceProgress:
    """A bar with the rate on a terminal; a plain line every few seconds otherwise."""

    WIDTH, PLAIN_EVERY_S = 30, 5.0

    def __init__(self, stream):
        self.stream, self.live = stream, stream.isatty()
        self._shown, self._last_plain = False, 0.0

    def show(self, p) -> None:
        done = p.sent / p.total if p.total else 1.0
        counts = f"{p.sent:,}/{p.total:,} sent, {p.delivered:,} delivered, {p.failed:,} failed, {p.rate:,.0f}/s"
        if self.live:
            filled = int(done * self.WIDTH)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            print(f"\r[{bar}] {done:4.0%} {counts}", end="", file=self.stream, flush=True)
            self._shown = True
        elif p.seconds - self._last_plain >= self.PLAIN_EVERY_S:
            self._last_plain = p.seconds
            print(f"progress: {counts}", file=self.stream, flush=True)

    def clear(self) -> None:
        if self._shown:
            print(file=self.stream)
            self._shown = False


# --- demo -----------------------------------------------------------------------


def add_demo(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "demo", parents=[environment], help="the whole story on an embedded broker, in a few minutes",
        description="Start an embedded Kafka broker, produce sample orders with producer retries, "
        "an aborted transaction and malformed records, run pipelines/orders.yaml with a crash "
        "and a restart in the middle, then audit the tables. Exit 1 if a count is not exact.")
    command.add_argument("--data-root", default=None, metavar="DIR",
                         help="DATA_ROOT, where the tables go; only the folders a previous demo made "
                         "there are emptied first (default: ./.ingest/data, as conf/local.yaml)")
    command.add_argument("--pipeline", default=None, metavar="FILE",
                         help="the pipeline to run (default: pipelines/orders.yaml)")
    command.add_argument("--orders", type=_positive_int, default=400, help="sample orders (default: 400)")
    command.add_argument("--max-offsets", type=_positive_int, default=200, metavar="N",
                         help="offsets per batch, so there are several (default: 200)")
    command.set_defaults(run=demo_command)


def demo_command(args) -> int:
    from pathlib import Path

    from ingest import demo

    _need_spark()
    options = demo.DemoOptions(Path(args.data_root) if args.data_root else demo.DEFAULT_ROOT,
                               Path(args.pipeline) if args.pipeline else None,
                               args.orders, args.max_offsets, env=args.env, conf_dir=args.conf_dir)
    try:
        report = demo.run_demo(options, say=lambda text: print(text, flush=True))
    except demo.DemoError as error:
        print(f"error: {error}", file=sys.stderr)
        return CHECK_FAILED
    except KeyboardInterrupt:
        print("interrupted: the broker is stopped; the tables so far stay in the data folder",
              file=sys.stderr)
        return 130
    print(render_demo_report(report))
    return OK if report.ok else CHECK_FAILED


def render_demo_report(report) -> str:
    s, c, a, where = report.sample, report.counts, report.audit, report.locations
    stages = ", ".join(f"{stage} {count}" for stage, count in sorted(c.dead_letters_by_stage.items()))
    rows = [
        ("records produced", s.produced, f"{s.orders} orders, {s.retries} producer retries, "
                                         f"{s.expected_dead_letters} malformed"),
        ("aborted transaction", s.aborted, "never visible to read_committed"),
        ("unique uids", s.orders, "what the target must hold"),
        ("rows in the target", c.target_rows, f"{c.unique_uids} distinct uids"),
        ("dead letters", c.dead_letters, stages),
        ("duplicates", _audit_figure(a.duplicates), "ingest.audit.verify"),
        ("missing", _audit_figure(a.missing), "ingest.audit.verify"),
        ("unaccounted offsets", _audit_figure(a.unaccounted), "ingest.audit.verify"),
    ]
    lines = ["", f"{'':2}{'':22}{'count':>7}"]
    lines += [f"  {name:<22}{value:>7}  {note}" for name, value, note in rows]
    lines += [f"  note: {note}" for note in a.notes]
    verdict = "exactly once: every uid once, nothing missing" if report.ok else "NOT EXACT: see above"
    lines += ["", f"{verdict} ({report.seconds:.0f}s; run 1 crashed on purpose, run 2 finished)",
              f"  target table   {where.target}", f"  dead letters   {where.dead_letter}",
              f"  checkpoint     {where.checkpoint}", f"  sample file    {s.jsonl_file}",
              f"Explore them with the notebooks in notebooks/ (DATA_ROOT={where.data_root})."]
    return "\n".join(lines)


def _audit_figure(value) -> str:
    return "-" if value is None else str(value)


# --- broker ---------------------------------------------------------------------


def add_broker(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "broker", parents=[environment], help="an embedded Kafka broker for local development",
        description="Start a single-node Apache Kafka (KRaft, transactions on) on 127.0.0.1 and "
        "print its bootstrap address. Ctrl-C or SIGTERM stops it (exit 0).")
    command.add_argument("--port", type=_positive_int, default=None,
                         help="client port (default: a free one)")
    command.add_argument("--data-dir", default=None, metavar="DIR",
                         help="where Kafka keeps its log; kept, so topics survive a restart "
                         "(default: a temporary folder, removed on stop)")
    command.add_argument("--topic", dest="topics", action="append", default=[], type=_topic_to_create,
                         metavar="NAME[:PARTITIONS]",
                         help="create this topic once the broker is up (default 1 partition); "
                         "repeat for more; one that exists already is kept")
    command.set_defaults(run=broker_command)


def _topic_to_create(text: str) -> tuple[str, int]:
    name, _, partitions = text.partition(":")
    if not name or (partitions and (not partitions.isdigit() or int(partitions) < 1)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME:PARTITIONS (a whole number >= 1)")
    return name, int(partitions or 1)


def broker_command(args) -> int:
    import signal
    from pathlib import Path

    from ingest.kafka.local_broker import BrokerError, LocalKafka, ensure_topic

    # a loaded laptop can take minutes for a first JVM start
    broker = LocalKafka(work_dir=Path(args.data_dir) if args.data_dir else None, port=args.port,
                        start_timeout_s=300)
    stopping = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    try:
        broker.start()
        for name, partitions in args.topics:
            created = ensure_topic(broker.client_config(), name, partitions)
            print(f"topic {name}: " + (f"created, {partitions} partition(s)" if created
                                       else "exists already, kept as it is"), file=sys.stderr)
        print(f"Kafka is up at {broker.bootstrap}  (Ctrl-C stops it)", file=sys.stderr)
        print(f"export KAFKA_BOOTSTRAP={broker.bootstrap}", flush=True)
        while not stopping and not broker.wait(0.5):
            pass
        if not stopping:
            print(f"error: the broker exited by itself; see {broker.log_file}", file=sys.stderr)
            return CHECK_FAILED
    except BrokerError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT if "already in use" in str(error) else CHECK_FAILED
    except KeyboardInterrupt:
        pass
    finally:
        broker.close()
        signal.signal(signal.SIGTERM, previous)
    print("Kafka stopped", file=sys.stderr)
    return OK


# --- maintain -------------------------------------------------------------------


def add_maintain(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "maintain", parents=[environment], help="compact and vacuum a pipeline's tables",
        description="OPTIMIZE and/or VACUUM the target and the dead letters, safe while the "
        "pipeline runs. VACUUM keeps files for the longest of maintenance.vacuum_retain and the "
        "table's delta.deletedFileRetentionDuration. With hard deletes, the delete log too: "
        "VACUUM first purges the deletes logged longer ago than maintenance.delete_log_retain. "
        "With neither flag, both run.")
    command.add_argument("file", metavar="FILE", help="pipeline file")
    command.add_argument("--optimize", action="store_true", help="compact small files")
    command.add_argument("--vacuum", action="store_true", help="delete files no version still needs")
    command.add_argument("--zorder", action="store_true", help="with --optimize: Z-order the target by _uid")
    command.add_argument("--json", action="store_true", help="results as JSON")
    command.set_defaults(run=maintain_command)


def maintain_command(args) -> int:
    _need_spark()
    from dataclasses import asdict

    from ingest.errors import IngestError
    from ingest.platform.session import get_session
    from ingest.run.maintenance import maintain

    pipeline = read_pipeline(args.file, settings=load_settings(args.env, args.conf_dir)).pipeline
    both = not (args.optimize or args.vacuum)
    try:
        done = maintain(get_session("ingest-maintain"), pipeline, optimize=args.optimize or both,
                        vacuum=args.vacuum or both, zorder=args.zorder)
    except IngestError as error:  # a conflict that kept coming back
        print(f"error: {mask(str(error), pipeline.secret_values)}", file=sys.stderr)
        return CHECK_FAILED
    if not done:
        print(f"note: {pipeline.name}: no table to maintain yet", file=sys.stderr)
    text = _json([asdict(one) for one in done]) if args.json else "\n".join(one.line() for one in done)
    print(mask(text, pipeline.secret_values))
    return OK


# --- replay ---------------------------------------------------------------------


def add_replay(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "replay", parents=[environment], help="reprocess a range of the topic into the same target",
        description="Reprocess records the pipeline has already committed, e.g. after a fix to a "
        "transform, under the replay's own checkpoint and transaction ids; the pipeline's checkpoint "
        "is not touched. Idempotent by uid (insert_only: a uid already there is a no-op; upsert: "
        "the later order_by wins). Records already in the dead letters are not replayed.")
    command.add_argument("file", metavar="FILE", help="pipeline file")
    start = command.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-timestamp", metavar="T", type=_timestamp_ms,
                       help="ISO 8601 (UTC unless it has an offset) or Unix milliseconds")
    start.add_argument("--from-offsets", metavar="JSON", type=_offsets_json,
                       help='{"topic": {"0": 120, "1": 80}}; partitions not named are not replayed')
    command.add_argument("--to-timestamp", metavar="T", type=_timestamp_ms,
                         help="stop before records of this time (default: where the pipeline is)")
    command.set_defaults(run=replay_command)


def _timestamp_ms(text: str) -> int:
    from datetime import datetime, timezone

    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time; expected ISO 8601 "
                                         "(2026-11-23T09:00:00Z) or Unix milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _offsets_json(text: str) -> dict:
    import json

    try:
        raw = json.loads(text)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {{topic: {{partition: offset}}}} JSON") from None


def replay_command(args) -> int:
    _need_spark()
    from ingest.errors import IngestError
    from ingest.platform.session import get_session
    from ingest.run.replay import replay, resolve_range

    pipeline = read_pipeline(args.file, settings=load_settings(args.env, args.conf_dir)).pipeline
    secrets = pipeline.secret_values
    try:
        spark = get_session("ingest-replay")
        span = resolve_range(spark, pipeline, args.from_timestamp, args.to_timestamp, args.from_offsets)
        print(f"note: replaying {span.records} offsets: {span.describe()}", file=sys.stderr)
        reports = replay(spark, pipeline, span, on_report=lambda r: print(mask(r.line(), secrets), flush=True))
    except IngestError as error:
        print(f"error: {mask(str(error), secrets)}", file=sys.stderr)
        return CHECK_FAILED
    inserted = sum(r.merged.inserted for r in reports)
    updated = sum(r.merged.updated for r in reports)
    print(f"{pipeline.name}: replayed {sum(r.summary.read for r in reports)} records in {len(reports)} "
          f"batch(es): inserted {inserted}, updated {updated}")
    return OK


# --- status ---------------------------------------------------------------------


def add_status(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "status", parents=[environment], help="where a pipeline stands, per partition",
        description="Per partition: Kafka's earliest and end offsets, the checkpoint's offset, the "
        "offset recorded in the Delta log and the lag (end minus where the next run starts); the "
        "last batch; and what any disagreement means. Exit 1 when the broker does not answer or "
        "a warning says data may be at risk.")
    command.add_argument("file", metavar="FILE", help="a pipeline file")
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(run=status_command)


def status_command(args) -> int:
    pipeline = read_pipeline(args.file, settings=load_settings(args.env, args.conf_dir)).pipeline
    _need_spark()
    from ingest.audit.status import status
    from ingest.platform.session import get_session

    if is_per_topic(pipeline):
        from ingest.audit.per_table import status_per_table

        report: Any = status_per_table(get_session("ingest-status"), pipeline)
        text = _json(report.to_dict()) if args.json else render_per_table(report, render_status)
    else:
        report = status(get_session("ingest-status"), pipeline)
        text = _json(report.to_dict()) if args.json else render_status(report)
    print(mask(text, pipeline.secret_values))
    return OK if report.ok else CHECK_FAILED


def render_status(report) -> str:
    shown = _audit_figure
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


# --- verify ---------------------------------------------------------------------


def add_verify(commands, environment: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "verify", parents=[environment], help="audit the target and dead letters against the topic",
        description="Read the topic (read_committed) and check that every record it holds is in "
        "the target (by uid), the dead letters (by offset) or the transform.where filter: "
        "duplicate uids, missing uids, unaccounted offsets. Records the pipeline has not consumed "
        "yet are counted, not audited. Exit 1 on any finding.")
    command.add_argument("file", metavar="FILE", help="a pipeline file")
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(run=verify_command)


def verify_command(args) -> int:
    pipeline = read_pipeline(args.file, settings=load_settings(args.env, args.conf_dir)).pipeline
    _need_spark()
    from ingest.audit.dispatch import verify_pipeline
    from ingest.errors import IngestError
    from ingest.platform.session import get_session

    try:
        report = verify_pipeline(get_session("ingest-verify"), pipeline)
    except IngestError as error:  # broker down or refusing us
        print(f"error: {mask(str(error), pipeline.secret_values)}", file=sys.stderr)
        return CHECK_FAILED
    text = _json(report.to_dict()) if args.json else render_any_verify(report)
    print(mask(text, pipeline.secret_values))
    return OK if report.ok else CHECK_FAILED


def render_any_verify(report) -> str:
    """The report `dispatch.verify_pipeline` gave: per table, of changes, or of records."""
    from ingest.audit.per_table import PerTableReport
    from ingest.audit.verify_changes import ChangesReport

    if isinstance(report, PerTableReport):
        return render_per_table(report, render_any_verify)
    return render_verify_changes(report) if isinstance(report, ChangesReport) else render_verify(report)


def render_verify(report) -> str:
    r = report
    audited = r.topic_records - r.not_yet_ingested - r.before_start
    figures = [
        ("topic records", r.topic_records, f"{audited} audited, {r.not_yet_ingested} not yet ingested, "
                                           f"{r.before_start} before the start"),
        ("unique uids", r.unique_uids, "of the audited records"),
        ("target rows", r.target_rows, ""),
        ("dead letters", r.dead_letters, ""),
        ("filtered", r.filtered, "by transform.where"),
        ("duplicate uids", r.duplicates, "uids with more than one target row"),
        ("missing uids", r.missing, "in neither the target, the dead letters nor the filter"),
        ("unaccounted offsets", r.unaccounted, "records in none of the three"),
        ("dead-letter copies", r.dead_letter_duplicates, "offsets with more than one dead letter"),
    ]
    verdict = "OK" if r.ok else "FAILED"
    lines = [f"verify {r.pipeline}: {verdict}"]
    lines += [f"  {name:<20}{value:>10}  {note}".rstrip() for name, value, note in figures]
    examples = [
        ("duplicate uids", r.duplicates, [f"{e.uid}: {e.rows} rows" for e in r.duplicate_examples]),
        ("missing uids", r.missing,
         [f"{e.uid} (first at {e.topic}/{e.partition}@{e.offset})" for e in r.missing_examples]),
        ("unaccounted offsets", r.unaccounted,
         [f"{e.topic}/{e.partition}@{e.offset}: {e.why}" for e in r.unaccounted_examples]),
        ("dead-letter copies", r.dead_letter_duplicates,
         [f"{e.topic}/{e.partition}@{e.offset}: {e.rows} rows" for e in r.dead_letter_duplicate_examples]),
    ]
    for title, count, shown in examples:
        if shown:
            lines += [f"{title} (first {len(shown)} of {count}):"] + [f"  {line}" for line in shown]
    lines += [f"finding: {finding}" for finding in r.findings]
    lines += [f"note: {note}" for note in r.notes]
    return "\n".join(lines)


def render_per_table(report, render_one) -> str:
    """A table per topic: one section per table, under the pipeline's verdict."""
    lines = [f"{report.pipeline}: {len(report.tables)} table(s), one per topic: "
             f"{'OK' if report.ok else 'ATTENTION'}"]
    if report.kafka_error:
        lines.append(f"error: {report.kafka_error}")
    for one in report.tables:
        lines.append(f"\n[{one.table}] topics {', '.join(one.topics)}")
        lines.append(render_one(one.report))
    return "\n".join(lines)


def render_verify_changes(report) -> str:
    r = report
    audited = r.topic_records - r.not_yet_ingested - r.before_start
    figures = [("topic records", r.topic_records, f"{audited} audited, {r.not_yet_ingested} not yet ingested, "
                                                  f"{r.before_start} before the start"),
               ("changes", r.changes, "applied: good envelopes among the audited records"),
               ("keys", r.keys, f"{r.live} live, {r.deleted} deleted by their last change"),
               ("dead letters", r.dead_letters, f"{r.failed} audited record(s) cannot be applied"),
               ("filtered", r.filtered, "tombstones after a delete, transform.where"),
               ("differing keys", r.differing, "the table does not hold the last change"),
               ("unaccounted offsets", r.unaccounted, "failures not in the dead letters, or good ones in them")]
    lines = [f"verify {r.pipeline}: {'OK' if r.ok else 'FAILED'}"]
    lines += [f"  {name:<20}{value:>10}  {note}".rstrip() for name, value, note in figures]
    if r.examples:
        lines.append(f"differing keys (first {len(r.examples)} of {r.differing}):")
        lines += [f"  {e.uid}: expected {e.expected}, found {e.found}" for e in r.examples]
    if r.unaccounted_examples:
        lines.append(f"unaccounted offsets (first {len(r.unaccounted_examples)} of {r.unaccounted}):")
        lines += [f"  {e.topic}/{e.partition}@{e.offset}: {e.why}" for e in r.unaccounted_examples]
    lines += [f"finding: {finding}" for finding in r.findings]
    lines += [f"note: {note}" for note in r.notes]
    return "\n".join(lines)


def _json(value) -> str:
    import json

    return json.dumps(value, indent=2, default=str)


# Other subcommands (run, status, verify, produce, demo, jars) are added here.
SUBCOMMANDS = (add_validate, add_plan, add_run, add_produce, add_demo, add_status, add_verify,
               add_broker, add_maintain, add_replay)
