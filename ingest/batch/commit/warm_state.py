"""The target's next table state, computed while the next batch reads Kafka.

A commit under a txn id first asks the table for that id's last version, and
Delta 4.4 answers from the aggregated state of the table's current snapshot
(`Snapshot.transactions`): one Spark job per batch, on the batch's critical path
between the summary and the MERGE. Delta installs the snapshot of the version a
commit made, and the next transaction starts from that same object while the
log is unchanged; its state is a lazy value computed once. So right after a
batch's commit a background thread asks that snapshot for its transactions, and
the next batch's MERGE finds the answer ready.

Read-only, so nothing of the exactly-once argument depends on it: the MERGE still
checks the txn id on its own transaction's snapshot. After a foreign commit
(another copy, OPTIMIZE) the warm state is of an older snapshot and simply unused;
a failure here is logged and forgotten. Without a JVM at hand (Spark Connect)
nothing is warmed.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ingest.platform.delta import Located, delta_log, latest_transactions

log = logging.getLogger("ingest.run")

JOB_GROUP = "ingest-background-warm-state"


class StateWarmer:
    """One table's warming thread; `join` before the next MERGE so the two never
    compute the same state side by side."""

    def __init__(self, session, target: Located):
        self._session = session
        self._target = target
        self._log: Any = None  # Delta's JVM DeltaLog, opened by the first warming
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.join()
        if getattr(self._session, "_jvm", None) is None:
            return
        from pyspark import InheritableThread

        self._thread = InheritableThread(target=self._warm, name="ingest-warm-state", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _warm(self) -> None:
        try:
            context = self._session.sparkContext
            # Its jobs are not the batch's: the bench counts them apart, and the UI names them.
            context.setJobGroup(JOB_GROUP, "ingest: the target's next table state", interruptOnCancel=False)
            if self._log is None:
                self._log = delta_log(self._session, self._target)
            latest_transactions(self._session, self._log)
        except Exception as error:  # the MERGE computes the state itself then
            log.debug("warming the table state of %s failed: %s", self._target, error)
