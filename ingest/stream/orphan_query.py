"""The query a killed Spark Connect client left on its server, ended before the rerun's starts.

On a server running apart (`ingest run --remote sc://...`, Databricks) the query lives on the
server, in the server-side session the client made for the pipeline (`pipeline_session`), and
its batches run in a Python worker there that calls the server through that same session. A
client killed (a scheduler's retry, an OOM kill) leaves both running: the query plans its next
batch and the worker commits it under the pipeline's txn app id, while the rerun replays it.
Spark's `stopActiveRunOnRestart` stops the old query when the new one starts, but not its
worker, whose batch went on committing beside the rerun's (`[DELTA_CONCURRENT_TRANSACTION]`).

Connect lists a session's own queries only, so each start records its pipeline session (id and
user) in the checkpoint, through the server (`MARKER`). The next start attaches to the session
recorded there, stops the pipeline's query in it, interrupts what runs in it and releases it:
the server then refuses every later call of that session, so the old worker's batch can commit
nothing more. A commit already inside Delta at that instant lands or not; the rerun's batch
meets it as a conflict under its own app id, retried (`batch.commit.conflicts`), and Delta
skips what it holds.

A second copy started while the first still runs takes over the same way: the first copy's
query is stopped and its run fails, where on a classic session the lease refuses the second.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

from ingest.errors import first_line
from ingest.platform.connect import server_lost
from ingest.platform.files import read_text
from ingest.spec.model import Pipeline

MARKER = "_ingest_connect_session"


def marker_location(pipeline: Pipeline) -> str:
    return f"{pipeline.checkpoint.rstrip('/')}/{MARKER}"


def end_previous(spark, own, pipeline: Pipeline, on_note: Callable[[str], None]) -> None:
    """Stop and fence the pipeline's query a previous client left on the server, then record
    `own` (the session this run's query starts from) for the next start."""
    recorded = _recorded(spark, pipeline)
    if recorded is not None and recorded.get("session_id") != own.session_id:
        try:
            stopped = _end_session(spark, recorded, pipeline.name)
        except Exception as error:
            if server_lost(error):
                raise
            # A server that will not let a client attach to another session (or a client
            # without pyspark's channel builder): what protects the target is then the retry
            # of a conflict under the pipeline's own app id, as before this module.
            on_note(f"{pipeline.name}: could not reach the session an earlier client left on the Spark Connect "
                    f"server ({recorded['session_id']}): {first_line(error, None)}; a batch its query may still "
                    "run meets this run's batch as a write conflict, retried")
            stopped = []
        if stopped:
            on_note(f"{pipeline.name}: stopped its query {', '.join(stopped)} left on the Spark Connect server by an "
                    f"earlier client (session {recorded['session_id']}), and closed that session so that its "
                    "last batch commits nothing more")
    record = json.dumps({"session_id": own.session_id, "user_id": own.client._user_id})
    # One small file through the server: its disk, or the store the checkpoint is on
    own.createDataFrame([(record,)], "value STRING").coalesce(1).write.mode("overwrite").text(
        marker_location(pipeline))


def _recorded(spark, pipeline: Pipeline) -> dict | None:
    text = read_text(spark, marker_location(pipeline))
    if not text:
        return None
    try:
        recorded = json.loads(text)
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) and recorded.get("session_id") else None


def _end_session(spark, recorded: dict, name: str) -> list[str]:
    """The queries of `name` stopped in the recorded session; the session interrupted and
    released whether or not it held one. A session the server no longer has (its client ended
    cleanly, or the server restarted) has nothing left to stop."""
    old = _attach(spark, recorded)
    try:
        try:
            queries = old.streams.active
        except Exception as error:
            if _session_gone(error):
                return []
            raise
        stopped = []
        for query in queries:
            if query.name == name:
                query.stop()
                stopped.append(str(query.id))
        old.interruptAll()  # the worker's call in flight, if any (a MERGE not yet committing)
        old.client.release_session()  # every later call of the session is refused
        return stopped
    finally:
        old.client.close()


def _attach(spark, recorded: dict) -> Any:
    """A client of the recorded server-side session, over the same server as `spark`'s (its
    URL, token and all), with `spark`'s retry policy."""
    from pyspark.sql.connect.client.core import ChannelBuilder
    from pyspark.sql.connect.session import SparkSession

    channel = copy.copy(spark.client._builder)  # the parsed URL of this run's session
    channel._params = dict(channel._params)  # a copy: the run's own session keeps its parameters
    channel.set(ChannelBuilder.PARAM_SESSION_ID, recorded["session_id"])
    if recorded.get("user_id"):
        channel.set(ChannelBuilder.PARAM_USER_ID, recorded["user_id"])
    old = SparkSession(connection=channel)
    old.client.set_retry_policies(spark.client.get_retry_policies())
    return old


def _session_gone(error: BaseException) -> bool:
    """The server released the session (its client ended cleanly, or a start before this one
    ended it) and refuses it as closed."""
    condition = getattr(error, "getCondition", lambda: None)() or str(error)
    return "SESSION_CLOSED" in condition or "SESSION_NOT_FOUND" in condition
