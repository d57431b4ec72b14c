"""ingest: exactly-once ingestion from Kafka into Delta Lake, declared in YAML.

The Python face of the command line, for notebooks, Databricks jobs and
scripts that already hold a SparkSession (it is used as it is):

    import ingest
    ingest.run(spark, "pipelines/orders.yaml", env="prod", once=True)  # blocks; raises ingest.RunFailed
    handle = ingest.start(spark, "pipelines/orders.yaml")              # returns at once
    handle.last_report; handle.stop(); handle.await_termination()
    ingest.status(spark, "pipelines/orders.yaml").to_dict()
    ingest.verify(spark, "pipelines/orders.yaml").ok

`run` and `start` do what `ingest run` does: the checkpoint's lease (a second
copy fails at once), recovery from the Delta log when the checkpoint is gone,
and the retention guard. Bad input raises `ingest.SpecErrors` (every problem,
with file, line and key path); a run that fails raises `ingest.RunFailed`.

Importing this module is cheap: pyspark is imported by the calls that need it.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ingest.errors import IngestError, RunFailed, SpecErrors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.audit.dispatch import AnyReport
    from ingest.audit.status import StatusReport
    from ingest.batch.processor import BatchReport
    from ingest.spec.model import Pipeline
    from ingest.stream.supervisor import Outcome, Supervisor

__version__ = "0.1.0"
__all__ = ["IngestError", "Run", "RunFailed", "SpecErrors", "__version__", "configure_spark",
           "load", "run", "start", "status", "verify"]

PathLike = Union[str, "os.PathLike[str]"]
log = logging.getLogger("ingest")


def load(path: PathLike, env: str = "local", conf_dir: PathLike | None = None) -> Pipeline:
    """The pipeline in `path` with `conf/<env>.yaml`'s values; raises SpecErrors."""
    from ingest.spec.loader import load_file

    return load_file(Path(path), env, conf_dir=_folder(conf_dir)).pipeline


def run(spark: SparkSession, path: PathLike | Sequence[PathLike], env: str = "local",
        once: bool = False, conf_dir: PathLike | None = None, preflight: bool = True) -> list[Outcome]:
    """Run pipelines until they finish (`once`) or stop; raises RunFailed when one fails.

    In a notebook, interrupting the cell stops the queries cleanly."""
    handle = start(spark, path, env=env, once=once, conf_dir=conf_dir, preflight=preflight)
    try:
        return handle.await_termination()
    except KeyboardInterrupt:
        handle.stop()
        raise


def start(spark: SparkSession, path: PathLike | Sequence[PathLike], env: str = "local",
          once: bool = False, conf_dir: PathLike | None = None, preflight: bool = True) -> Run:
    """Start pipelines and return at once; the handle stops, awaits and reports them.

    `preflight=False` is `ingest run --no-preflight`: no broker check and no retention
    guard from the Python client, for a login only Spark's Java client speaks."""
    from ingest.batch.commit import faults
    from ingest.spec.loader import check_unique, load_file
    from ingest.spec.settings import load_settings
    from ingest.stream.supervisor import Supervisor

    settings = load_settings(env, _folder(conf_dir))
    loaded = [load_file(Path(one), settings=settings) for one in _paths(path)]
    problems = check_unique(loaded)
    if problems:
        raise SpecErrors(problems)
    fault_warning = faults.warning()
    if fault_warning:
        warnings.warn(fault_warning, stacklevel=2)
    handle = Run([one.pipeline for one in loaded])
    if not preflight:
        warnings.warn("preflight=False: no broker check and no retention guard from ingest; Spark's "
                      "Kafka client still stops on lost offsets (unless allow_data_loss)", stacklevel=2)
    supervisor = Supervisor(handle.pipelines, once, on_report=handle._reported, on_note=handle._note,
                            preflight=preflight)
    handle._begin(supervisor, spark)
    return handle


def status(spark: SparkSession, path: PathLike, env: str = "local",
           conf_dir: PathLike | None = None) -> StatusReport:
    """`ingest status` as data: offsets per partition in Kafka, the checkpoint and the
    Delta log, the lag, the last batch and the findings (`.to_dict()` for JSON)."""
    from ingest.audit.status import status as read_status

    return read_status(spark, load(path, env, conf_dir))


def verify(spark: SparkSession, path: PathLike, env: str = "local",
           conf_dir: PathLike | None = None) -> AnyReport:
    """`ingest verify` as data, the command's own report (`.ok`, `.to_dict()`): duplicate
    uids, missing uids, unaccounted offsets; for cdc the keys the table got wrong; for a
    table per topic one report per table."""
    from ingest.audit.dispatch import verify_pipeline

    return verify_pipeline(spark, load(path, env, conf_dir))


def configure_spark(builder: SparkSession.Builder) -> SparkSession.Builder:
    """`builder` with Delta and Spark's Kafka connector set up (jars as `INGEST_JARS` says),
    in the style of delta-spark's `configure_spark_with_delta_pip`; the session is yours."""
    from ingest.platform.builder import configure_builder

    return configure_builder(builder)


class Run:
    """Running pipelines started by `ingest.start`: one streaming query each."""

    def __init__(self, pipelines: list[Pipeline]):
        self.pipelines = pipelines
        self.reports: list[BatchReport] = []  # every batch so far, oldest first
        self.notes: list[str] = []  # recovery and retention notes, as `ingest run` prints them
        self._supervisor: Supervisor | None = None
        self._outcomes: list[Outcome] | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._secrets = frozenset().union(*(p.secret_values for p in pipelines))

    @property
    def last_report(self) -> BatchReport | None:
        """The latest batch's report (counts, offsets, seconds); None before the first."""
        return self.reports[-1] if self.reports else None

    @property
    def is_active(self) -> bool:
        return not self._done.is_set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop every query cleanly (the batch in flight finishes) and release the leases."""
        if self._supervisor is not None:
            self._supervisor.request_stop()
        self._done.wait(timeout)

    def await_termination(self, timeout: float | None = None) -> list[Outcome]:
        """Wait until every query has ended; raises RunFailed for the first that failed,
        TimeoutError when `timeout` seconds pass first."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"pipelines still running after {timeout}s")
        if self._error is not None:
            raise self._error
        assert self._outcomes is not None
        failed = [outcome for outcome in self._outcomes if outcome.error]
        if failed:
            raise _run_failed(failed[0], self._secrets)
        return self._outcomes

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- inside ---

    def _begin(self, supervisor: Supervisor, spark: SparkSession) -> None:
        supervisor.claim()  # a second copy or a dead broker fails here, before any query
        try:
            supervisor.start(spark)
        except BaseException:
            supervisor.release()
            raise
        self._supervisor = supervisor
        threading.Thread(target=self._wait, args=(supervisor,), name="ingest-run", daemon=True).start()

    def _wait(self, supervisor: Supervisor) -> None:
        try:
            self._outcomes = supervisor.wait()
        except BaseException as error:  # handed to whoever awaits the run
            self._error = error
        finally:
            supervisor.release()
            self._done.set()

    def _reported(self, report: BatchReport, _catch_up) -> None:
        self.reports.append(report)
        log.info(report.line())

    def _note(self, text: str) -> None:
        from ingest.spec.settings import mask

        self.notes.append(mask(text, self._secrets))
        log.warning(self.notes[-1])


def _run_failed(outcome: Outcome, secrets: frozenset[str]) -> RunFailed:
    from ingest.spec.settings import mask

    return RunFailed(mask(outcome.error or "", secrets), pipeline=outcome.pipeline,
                     batch_id=outcome.batch_id, offsets=outcome.offsets, cause=outcome.cause)


def _folder(conf_dir: PathLike | None) -> Path | None:
    return None if conf_dir is None else Path(conf_dir)


def _paths(path: PathLike | Sequence[PathLike]) -> list[PathLike]:
    if isinstance(path, (str, os.PathLike)):
        return [path]
    return list(path)
