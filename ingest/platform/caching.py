"""A DataFrame that is read more than once, cached where the server allows it.

Databricks serverless refuses caching, and on Spark Connect `persist` asks the server at
once, so the refusal comes here. A batch's frames are then read again from their source on
each pass: the batch is a fixed offset range of the topic, read `read_committed`, so every
pass sees the same records and the summary's counts (in the ledger) agree with what the
MERGE writes. What it costs: the batch read from Kafka once more per pass.

An audit reads the whole topic to its latest offset and the tables at their latest version:
two passes of those could disagree, so `verify` does not go on without its cache (`required`).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

from pyspark.sql import DataFrame

from ingest.errors import first_line
from ingest.platform.connect import ConnectUnsupported, is_connect, server_lost

log = logging.getLogger("ingest.run")

# The server's answer once it refused, kept for this process: each batch asks no more.
_refused: list[str] = []


class CacheRefused(ConnectUnsupported):
    """A pass that needs one consistent view, on a server that refuses caching (exit 2)."""


def kept(frame: DataFrame, held: ExitStack) -> DataFrame:
    """`frame` cached until `held` closes; `frame` itself where the server refuses caching."""
    if _refused:
        return frame
    try:
        cached = frame.persist()
    except Exception as error:
        if not is_connect(frame.sparkSession) or server_lost(error):
            raise
        _refused.append(first_line(error, None))
        log.warning("the Spark Connect server refuses caching (%s); each batch reads its records from "
                    "Kafka once per pass instead", _refused[0])
        return frame
    held.callback(cached.unpersist)
    return cached


def let_go(frame: DataFrame) -> None:
    """Drop `frame`'s cache before `held` closes (a cache the next pass replaces)."""
    if not _refused:
        frame.unpersist()


def required(frame: DataFrame, held: ExitStack, what: str) -> DataFrame:
    """`frame` cached until `held` closes, or CacheRefused naming `what` needs it."""
    result = kept(frame, held)
    if _refused:
        raise CacheRefused(f"{what} needs caching, for one view of the topic and the tables across its passes, "
                           f"and this Spark Connect server refuses it ({_refused[0]}); run it on a cluster "
                           "that allows caching (a classic or dedicated-access session)")
    return result
