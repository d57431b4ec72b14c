"""Spark Connect: a session whose driver is a server elsewhere (Databricks serverless and
standard access mode, or any `sc://` server).

The client holds no JVM: no `_jvm`, no `sparkContext`, and `foreachBatch` runs the pickled
batch function in a Python worker beside the server. The rest of `ingest` asks
`is_connect` where the two differ. A session is chosen the usual way: `--remote URL` on
the command line, else `SPARK_REMOTE`; `local[N]` starts a server in this process (it
refuses to where a classic session exists), configured as a local classic session is.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Mapping

from ingest.errors import IngestError
from ingest.platform.builder import LOCAL_DEFAULTS, SessionError, configure_builder, merged
from ingest.platform.files import disk_apart, mark_disk_apart

REMOTE_VARIABLE = "SPARK_REMOTE"
NO_CLIENT = ("Spark Connect needs its Python client: pip install 'ingest[connect]' "
             "(pandas, pyarrow, grpcio, grpcio-status, zstandard)")


class ConnectUnsupported(IngestError):
    """A feature that needs the driver's JVM in this process, asked of a Connect session."""


def is_connect(session) -> bool:
    """Whether `session` is a Spark Connect session (pyspark's or Databricks Connect's)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def remote_url(option: str | None = None) -> str | None:
    """The Connect server asked for: the option, else SPARK_REMOTE; None for a classic session."""
    return option or os.environ.get(REMOTE_VARIABLE) or None


def connect_session(url: str, app_name: str = "ingest", conf: dict[str, str] | None = None):
    """A Connect session to `url`. For `local[N]` the server starts here and takes Delta,
    the Kafka connector's jars and the local defaults; a remote server keeps its own."""
    try:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.remote(url).appName(app_name)
        if url.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # the batch function's worker runs this interpreter, which has ingest installed
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = configure_builder(builder, merged(LOCAL_DEFAULTS, conf))
        else:
            _check_reachable(url)
            for key, value in (conf or {}).items():
                builder = builder.config(key, value)
        with warnings.catch_warnings():
            # The in-process server took the static settings at its start; the client then sets
            # every builder setting again and warns of the static ones it cannot change.
            warnings.filterwarnings("ignore", message="Failed to set", category=UserWarning)
            session = builder.getOrCreate()
    except ImportError as missing:
        raise SessionError(f"{NO_CLIENT}; {missing}") from None
    from pyspark.sql.connect.client.retries import DefaultPolicy

    # A call the server does not answer is retried for about a minute (50 ms, x4 each time, at
    # most 10 s: 54 s), where pyspark's own policy waits at least ten minutes: a server that
    # went away took its streaming queries with it, and the run should fail while someone
    # still watches (the next run resumes from the checkpoint).
    session.client.set_retry_policies([DefaultPolicy(max_retries=9, max_backoff=10_000)])
    # pyspark warns as it gives up; the run says the server stopped answering in a line of its own
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    if server_apart(url):
        mark_disk_apart(session)
    return session


def server_apart(url: str) -> bool:
    """Whether a Connect URL names a server of its own (`sc://...`), whose files are its
    machine's: `local[N]` starts the server in this process, on this disk."""
    return not url.startswith("local")


def _check_reachable(url: str) -> None:
    """The server's port answers, or the session is refused naming the address: the client
    sends its first call (the builder's settings) with pyspark's retries, ten minutes of
    them, before a server that is not there surfaces as a traceback."""
    import socket

    from pyspark.sql.connect.client import DefaultChannelBuilder

    channel = DefaultChannelBuilder(url)  # pyspark's reading of the URL; its token stays in there
    port = channel.url.port or DefaultChannelBuilder.default_port()
    try:
        socket.create_connection((channel.url.hostname, port), timeout=10).close()
    except OSError as error:
        raise SessionError(f"the Spark Connect server {channel.endpoint} cannot be reached: "
                           f"{error.strerror or error}") from None


def server_lost(error: BaseException) -> bool:
    """Whether a Connect call failed because the server cannot be reached (gRPC UNAVAILABLE
    once the client's retries ran out): it died, or the network to it is gone."""
    status = getattr(error, "getGrpcStatusCode", None)
    return status is not None and getattr(status(), "name", None) == "UNAVAILABLE"


def abandon(session) -> None:
    """Close the channel of a session whose server is lost, without the calls that would
    release the session there: pyspark makes them at exit otherwise, each waiting out the
    retries (two minutes more before the process ends)."""
    try:
        session.client.close()
    except Exception:  # best effort: the channel is being dropped anyway
        pass


def pipeline_session(session, settings: Mapping[str, str]):
    """A server-side session of the pipeline's own, cloned from `session`, with the pipeline's
    `spark_conf` on it. On Connect the batch function's worker attaches to the session that
    started the query, and a batch's txn id is session conf: two pipelines on one session
    could put one's app id on the other's commit. None where the server cannot clone."""
    try:
        own = session.cloneSession()
    except Exception:  # a server without CloneSession (older than Spark 4.2)
        return None
    own.client.set_retry_policies(session.client.get_retry_policies())
    if disk_apart(session):
        mark_disk_apart(own)
    # A query killed while Spark wrote its first offsets leaves a temporary file that this
    # check refuses on every start; ingest plans the start itself from the checkpoint and
    # the Delta log (`stream.recovery`), and its query keeps no state the check protects.
    own.conf.set("spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart", "false")
    for key, value in settings.items():
        own.conf.set(key, value)
    return own


def release(session) -> None:
    """Let the server drop a session `pipeline_session` made, once its query ended. Best
    effort: the run's outcome is known by then, and a server drops an idle session itself."""
    try:
        session.client.release_session()
    except Exception:
        pass
    finally:
        session.client.close()


def unreachable(error: BaseException) -> str:
    """What gRPC said of a server it could not reach (the address and why), without the
    call's dump around it."""
    found = re.search(r'details = "([^"]*)"', str(error))
    return found.group(1) if found else str(error).strip().split("\n")[0]


def refuse(what: str) -> ConnectUnsupported:
    """The error for a feature Connect cannot carry: said plainly, never half done."""
    return ConnectUnsupported(f"{what} is not available on Spark Connect: it needs the Spark driver's JVM "
                              "in this process; run it with a classic session (no --remote, no SPARK_REMOTE)")
