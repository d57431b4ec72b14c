"""`ingest run`: pipelines as streaming queries in one Spark application, each
batch as a line on stdout, until they finish, fail or are stopped."""

from __future__ import annotations

import sys

from ingest.cli.options import settings_of
from ingest.cli.output import CHECK_FAILED, INTERRUPTED, OK, print_problems
from ingest.spec.loader import check_unique, load_file
from ingest.spec.settings import mask

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser("run", parents=parents, help="run pipelines",
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
    command.add_argument("--remote", metavar="URL", default=None,
                         help="run on Spark Connect: sc://HOST:PORT, or local[N] for a server in this "
                         "process (default: $SPARK_REMOTE; unset, a classic session)")
    command.add_argument("--fail-fast", action="store_true",
                         help="stop every pipeline when one fails (by default the others go on; "
                         "the exit code is 1 either way)")


def run(args) -> int:
    settings = settings_of(args)
    loaded = [load_file(file, settings=settings) for file in args.files]
    problems = check_unique(loaded)
    if problems:
        return print_problems(problems, problems[0].file, sys.stderr)
    for one in loaded:
        for warning in one.warnings:
            print(warning.render(), file=sys.stderr)
    pipelines = [one.pipeline for one in loaded]
    # cli.main masks what a start-time error says with these
    args.secrets = frozenset().union(*(p.secret_values for p in pipelines))
    from ingest.batch.commit import faults

    if faults.warning():
        print(f"{'!' * 78}\nWARNING: {faults.warning()}\n{'!' * 78}", file=sys.stderr, flush=True)

    if args.no_preflight:
        print("warning: --no-preflight: no broker check before Spark starts and no retention guard "
              "from ingest; Spark's Kafka client still stops on lost offsets (unless "
              "allow_data_loss), and a broker that does not answer shows only as a slow, failed query",
              file=sys.stderr)
    return _supervise(pipelines, args.once, args.secrets, preflight=not args.no_preflight,
                      fail_fast=args.fail_fast, remote=args.remote, local_conf=settings.session_conf)


def _supervise(pipelines, once: bool, secrets, preflight: bool = True, fail_fast: bool = False,
               remote: str | None = None, local_conf=None) -> int:
    import signal
    import threading

    from ingest.platform.connect import remote_url, server_apart
    from ingest.platform.session import SessionStart
    from ingest.stream.supervisor import Supervisor

    progress = _ProgressPrinter(secrets)
    url = remote_url(remote)
    supervisor = Supervisor(pipelines, once, on_report=progress.batch, on_note=progress.note,
                            preflight=preflight, fail_fast=fail_fast,
                            server_apart=url is not None and server_apart(url))
    # the JVM starts while the leases and the preflight run; then Delta's MERGE warms up
    session = SessionStart("ingest-run", warm_up=True, remote=remote, local_conf=local_conf)
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
    return INTERRUPTED if signal.SIGINT in stopped_by else OK


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
