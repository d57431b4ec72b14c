"""Delta's MERGE, run once on a scratch table while `ingest run` starts its queries.

A new JVM pays for the first MERGE with seconds of class loading, code generation
and first planning (`docs/performance.md`, Start-up): in `ingest run` that lands
on the first batch, after the query's own start-up, in which the driver mostly
waits on Kafka. A tiny MERGE into a table in a temporary folder, on a thread
started with the session, moves that cost into the wait. It touches nothing of
the pipeline's: its table is made, merged into and deleted here (a run killed
meanwhile leaves its folder to the next run's warm-up), and a failure is only
logged. Local sessions only (a cluster's driver may not write local files).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ingest.platform.delta import at_location
from ingest.platform.processes import process_alive

log = logging.getLogger("ingest.run")
PREFIX = "ingest-warm-up-"  # then the run's pid, a dash, and mkdtemp's random part


def remove_orphans(scratch_in: str | None = None) -> None:
    """The folders of runs killed during their warm-up (a SIGKILL skips the removal at
    its end): those whose process is gone from this machine."""
    for folder in Path(scratch_in or tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = folder.name.removeprefix(PREFIX).split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def start(session, scratch_in: str | None = None) -> threading.Thread:
    """The warm-up's thread; its table goes in a new folder in `scratch_in` (the system's
    temporary folder by default)."""
    thread = threading.Thread(target=_merge_once, args=(session, scratch_in), name="ingest-warm-up", daemon=True)
    thread.start()
    return thread


def _merge_once(session, scratch_in: str | None) -> None:
    remove_orphans(scratch_in)
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=scratch_in)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # a run that ends before it does
    try:
        session.sparkContext.setJobGroup("ingest-background-warm-up", "ingest: Delta's MERGE, warmed up",
                                         interruptOnCancel=False)
        # a session of its own: the batch's insert-only MERGE joins without broadcast
        session = session.newSession()
        session.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
        rows = session.range(2).selectExpr("CAST(id AS STRING) AS _uid", "id AS n")
        rows.limit(1).write.format("delta").save(folder)
        table = at_location(session, folder, is_table=False).alias("t")
        table.merge(rows.alias("s"), "t._uid = s._uid").whenNotMatchedInsertAll().execute()
    except Exception as error:  # the first batch pays for the warm-up itself then
        log.debug("warming up Delta's MERGE failed: %s", error)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
