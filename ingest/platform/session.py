"""SparkSession set-up: Delta, Spark's Kafka connector, and where their jars come from.

`configure_builder` takes a builder and returns it configured, in the style of
delta-spark's `configure_spark_with_delta_pip`. `get_session` reuses a session
that already exists (Databricks, a notebook, spark-submit) with its settings
as they are, and otherwise builds one. Nothing here runs at import time.

Jars (`INGEST_JARS`):
  cache (default)   resolve once with Maven into the cache folder, then `spark.jars`
  packages          Spark's own `spark.jars.packages` (Ivy) resolution
  none              add nothing: Databricks, or `spark-submit --jars/--packages`
  <a folder>        every jar in that folder (air-gapped clusters)
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from ingest.errors import IngestError
from ingest.platform import jars, own_jar

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# Where ingest builds the session (locally or under spark-submit, never on Databricks or a
# session that exists): PySpark's DataFrame debugging records the Python call site of every
# DataFrame function in the JVM (an active-session lookup, a conf read, a set and a clear: five
# calls through py4j beside the function's own), for error messages that would name ingest's
# own lines. A batch made three times the calls with it (docs/performance.md)
DRIVER_DEFAULTS = {"spark.python.sql.dataFrameDebugging.enabled": "false"}

LOG_CONFIG = Path(__file__).parents[1] / "resources" / "log4j2.properties"

# Local runs: one task per core is enough for a micro-batch (docs/performance.md).
_LOCAL_TASKS = str(max(2, min(os.cpu_count() or 2, 8)))

LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": _LOCAL_TASKS,
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
    # Delta rebuilds the table's file list (log replay) in 50 tasks by default, several
    # times per MERGE; on a local machine that is most of a small batch (bench/results/README.md)
    "spark.databricks.delta.snapshotPartitions": _LOCAL_TASKS,
    # VACUUM lists the table's files in stages of this many tasks (10,000 by default):
    # `ingest maintain` of a small table ran 70,000 tasks on 2 cores (docs/performance.md)
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": _LOCAL_TASKS,
    # Adaptive execution runs each shuffle's map side as a job of its own: a small batch
    # took 10 jobs with it, 5 without, and half the time (docs/performance.md)
    "spark.sql.adaptive.enabled": "false",
    # Every SQL execution renders its plan for the UI's SQL tab; the default "formatted"
    # rendering was a fifth of the driver's time in a small batch (docs/performance.md)
    "spark.sql.ui.explainMode": "simple",
    # Delta 4.4 re-verifies a small table's file list against its checksum after every
    # commit when the JVM's time zone is not UTC; the commit is as safe without it
    "spark.databricks.delta.allFilesInCrc.verificationMode.forceOnNonUTC.enabled": "false",
    # Spark's default log config prints INFO on stdout until setLogLevel runs; ours keeps
    # stdout for what `ingest` reports
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG}",
}


class SessionError(IngestError):
    """The SparkSession could not be configured."""


def on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def under_spark_submit() -> bool:
    """spark-submit launches the Python driver with a gateway already up."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def jar_mode() -> str:
    default = "none" if on_databricks() or under_spark_submit() else "cache"
    return os.environ.get("INGEST_JARS", default)


def jar_conf(mode: str | None = None) -> dict[str, str]:
    """The Spark settings that bring Delta and the Kafka connector for a jar mode."""
    mode = mode or jar_mode()
    if mode == "none":
        return {}
    if mode == "packages":
        artifacts = jars.spark_artifacts()
        return {"spark.jars.packages": ",".join(a.coordinate for a in artifacts),
                "spark.jars.excludes": ",".join(sorted({e for a in artifacts for e in a.exclusions})),
                **_with_own_jar([])}
    if mode == "cache":
        return _with_own_jar(jars.resolve_spark_jars())
    folder = Path(mode)
    found = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not found:
        raise SessionError(
            f"INGEST_JARS={mode!r} is neither cache, packages, none nor a folder with jars"
        )
    if any(p.name.startswith("ingest-delta") for p in found):
        return {"spark.jars": ",".join(str(p) for p in found), **own_jar.log_store_conf()}
    return {"spark.jars": ",".join(str(p) for p in found)}


def _with_own_jar(found: list[Path]) -> dict[str, str]:
    """`spark.jars` with ingest's own jar and its log store for S3 where it builds (a JDK's javac);
    without it S3 tables keep Delta's default log store, and `ingest run` says what that allows."""
    try:
        found = [*found, own_jar.build()]
        extra = own_jar.log_store_conf()
    except jars.JarResolutionError:
        extra = {}
    return {"spark.jars": ",".join(str(p) for p in found), **extra} if found else extra


def _check_jar_mode() -> None:
    """Under spark-submit the driver's JVM is already running: jars set now would
    reach the executors but not the driver, which then fails on its first query."""
    mode = jar_mode()
    if under_spark_submit() and mode != "none":
        raise SessionError(
            f"INGEST_JARS={mode!r} cannot take effect under spark-submit (the driver is "
            "already running); give the jars to spark-submit instead: --jars <jar,jar,...> "
            "or --packages <coordinates> (docs/cluster.md)")


def configure_builder(builder, extra_conf: dict[str, str] | None = None, mode: str | None = None):
    """Return `builder` set up for Delta and Kafka; `extra_conf` wins over defaults."""
    return _configured(builder, {**DELTA_CONF, **jar_conf(mode), **(extra_conf or {})})


def _configured(builder, settings: dict[str, str]):
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


def get_session(app_name: str = "ingest", conf: dict[str, str] | None = None,
                master: str | None = None, remote: str | None = None,
                local_conf: Mapping[str, str] | None = None):
    """The active SparkSession if there is one (used as is), else a new configured one;
    a Spark Connect session when `remote` or SPARK_REMOTE names a server (`platform.connect`).
    `local_conf` (conf/<env>.yaml's `session:`: the master, the driver's heap) applies only to
    a JVM started here, never under spark-submit or on Databricks, whose own settings stand."""
    from pyspark.sql import SparkSession

    from ingest.platform.connect import connect_session, remote_url

    url = remote_url(remote)
    if url is not None:
        return connect_session(url, app_name, conf)
    existing = existing_session()
    if existing is not None:
        return existing
    _check_jar_mode()
    local = not (on_databricks() or under_spark_submit())
    settings = {"spark.app.name": app_name, **DELTA_CONF, **DRIVER_DEFAULTS, **jar_conf(),
                **({**LOCAL_DEFAULTS, **(local_conf or {})} if local else {}), **(conf or {})}
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (the avro/protobuf decoders) need the driver's packages:
        # locally that is the driver's own interpreter, not whatever python3 is on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings["spark.master"] = master or settings.get("spark.master", "local[*]")
        launch_jvm_apart(settings)
    session = _configured(SparkSession.builder, settings).getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _import_pyspark_helpers(session)
    return session


# The JVM classes PySpark names without their package for every DataFrame function it calls
PYSPARK_HELPERS = ("org.apache.spark.sql.functions", "org.apache.spark.api.python.PythonUtils",
                   "org.apache.spark.sql.api.python.PythonSQLUtils")


def _import_pyspark_helpers(session) -> None:
    """py4j finds a class PySpark names without its package (`_jvm.functions`) by trying each of
    PySpark's package imports in turn, each miss a search of every jar on the classpath: 340 us a
    lookup, tens of them a batch. Imported by name, 90 us (docs/performance.md)."""
    from py4j.java_gateway import java_import

    for name in PYSPARK_HELPERS:
        java_import(session._jvm, name)


def launch_jvm_apart(settings: dict[str, str]) -> None:
    """Start the driver JVM in a session of its own, as pyspark would start it otherwise.

    `timeout`, container inits and a terminal's Ctrl-C signal the whole process
    group; a JVM in that group dies of the SIGTERM before `ingest run` has stopped
    its queries. Out of the group, the JVM hears only `ingest`, and it still exits
    when this process goes away (its stdin, a pipe from here, closes). systemd's
    KillMode=control-group signals every process of the unit, this JVM too: the
    supervisor takes a JVM gone after a stop request for a stop."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM this process started already
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    SparkContext._ensure_initialized(gateway=launch_gateway(conf, popen_kwargs={"start_new_session": True}))


def existing_session():
    """A session someone else started, untouched; None when there is none.

    The active session of this thread first. On Databricks the runtime owns the
    session, and a job's code may run in a thread where it is not the active
    one: an empty builder returns it without setting anything on it (a
    configured builder would apply its settings to the runtime's session)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None or not on_databricks():
        return active
    return SparkSession.builder.getOrCreate()


def clone_with(spark, settings: Mapping[str, str]):
    """A clone of `spark` as it is now, with `settings` over its own: the session a
    streaming query clones for its batches, made before the query starts. None without
    a JVM (Spark Connect), where a session cannot be cloned from the client."""
    from pyspark.sql import SparkSession

    if getattr(spark, "_jvm", None) is None:
        return None
    clone = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    for key, value in settings.items():
        clone.conf.set(key, str(value))
    return clone


class SessionStart:
    """`get_session` on a daemon thread, so the JVM starts while the caller does work
    that needs no Spark (`ingest run`: the leases and the broker preflight). If that
    work fails, the caller exits without waiting: pyspark kills a launched JVM at exit."""

    def __init__(self, app_name: str, conf: dict[str, str] | None = None, warm_up: bool = False,
                 remote: str | None = None, local_conf: Mapping[str, str] | None = None):
        from ingest.platform.connect import remote_url

        self._session = None
        self._local_conf = local_conf
        self._remote = remote_url(remote)
        self._warm_up = warm_up
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(app_name, conf),
                                        name="ingest-session-start", daemon=True)
        self._thread.start()

    def _start(self, app_name: str, conf: dict[str, str] | None) -> None:
        try:
            if self._remote is not None:  # no JVM here to warm up
                from ingest.platform.connect import connect_session

                self._session = connect_session(self._remote, app_name, conf)
                return
            fresh = existing_session() is None and not (on_databricks() or under_spark_submit())
            self._session = get_session(app_name, conf, local_conf=self._local_conf)
            if self._warm_up and fresh:
                from ingest.platform import warm_up

                warm_up.start(self._session)
        except BaseException as error:  # handed to whoever asks for the session
            self._error = error

    def result(self):
        """The session, once started; its start's error, if it failed."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._session
