"""SparkSession set-up: reuse the session that exists, else build one configured by `builder`.

`get_session` reuses a session that already exists (Databricks, a notebook,
spark-submit) with its settings as they are, and otherwise builds one (a Connect
session when a server is named: `connect`). Nothing here runs at import time.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

from ingest.platform.builder import (
    DELTA_CONF,
    DRIVER_DEFAULTS,
    LOCAL_DEFAULTS,
    check_jar_mode,
    configured,
    jar_conf,
    merged,
    on_databricks,
    under_spark_submit,
)


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
    check_jar_mode()
    local = not (on_databricks() or under_spark_submit())
    settings = session_settings(app_name, conf, local_conf, local)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (the avro/protobuf decoders) need the driver's packages:
        # locally that is the driver's own interpreter, not whatever python3 is on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings["spark.master"] = master or settings.get("spark.master", "local[*]")
        launch_jvm_apart(settings)
    session = configured(SparkSession.builder, settings).getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    _import_pyspark_helpers(session)
    return session


def session_settings(app_name: str, conf: Mapping[str, str] | None, local_conf: Mapping[str, str] | None,
                     local: bool) -> dict[str, str]:
    """What a session built here is given: the pipeline's `conf` wins over conf/<env>.yaml's
    `session:`, which wins over the local defaults; the driver's JVM options are joined (`merged`)."""
    return merged({"spark.app.name": app_name}, DELTA_CONF, DRIVER_DEFAULTS, jar_conf(),
                  *((LOCAL_DEFAULTS, local_conf) if local else ()), conf)


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
