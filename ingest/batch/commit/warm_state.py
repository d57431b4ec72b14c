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

The same thread starts the table's checkpoints. Delta writes one in the committing
thread at every multiple of `delta.checkpointInterval` (10 by default): a second or
so on every tenth batch. Tables ingest makes carry an interval of
TABLE_CHECKPOINT_INTERVAL instead, and while ingest writes them a checkpoint of
the snapshot just warmed is written beside the next batch at the multiples of
CHECKPOINT_EVERY (or at the first commit after one): the cadence readers had, off
the batch's path. A checkpoint only summarises commits already in the log (Delta's own
`DeltaLog.checkpoint`, written under a temporary name and renamed), so a crash in
the middle of one loses nothing; a table with an interval of CHECKPOINT_EVERY or
less is left to Delta's own checkpoints.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ingest.platform.delta import Located, checkpoint_position, delta_log, latest_snapshot, write_checkpoint

log = logging.getLogger("ingest.run")

JOB_GROUP = "ingest-background-warm-state"
CHECKPOINT_JOB_GROUP = "ingest-background-checkpoint"
CHECKPOINT_EVERY = 10  # commits: Delta's default interval
TABLE_CHECKPOINT_INTERVAL = 100  # on tables ingest makes: Delta's own, for when no ingest run writes


class StateWarmer:
    """One table's warming thread; `join` before the next MERGE so the two never
    compute the same state side by side."""

    def __init__(self, session, target: Located):
        self._session = session
        self._target = target
        self._log: Any = None  # Delta's JVM DeltaLog, opened by the first warming
        self._thread: threading.Thread | None = None
        self._checkpointing: threading.Thread | None = None  # not joined: the next MERGE may run beside it

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

    def settle(self) -> None:
        """The warming and a checkpoint in progress, finished."""
        self.join()
        if self._checkpointing is not None:
            self._checkpointing.join()

    def _warm(self) -> None:
        try:
            context = self._session.sparkContext
            # Its jobs are not the batch's: the bench counts them apart, and the UI names them.
            context.setJobGroup(JOB_GROUP, "ingest: the target's next table state", interruptOnCancel=False)
            if self._log is None:
                self._log = delta_log(self._session, self._target)
            snapshot = latest_snapshot(self._session, self._log)
            snapshot.transactions()
            version, last, interval = checkpoint_position(self._log, snapshot)
            # at the multiples of CHECKPOINT_EVERY, as Delta's default would, or the first commit after
            if interval > CHECKPOINT_EVERY and version // CHECKPOINT_EVERY > max(last, 0) // CHECKPOINT_EVERY:
                self._start_checkpoint(snapshot)
        except Exception as error:  # the MERGE computes the state itself then
            log.debug("warming the table state of %s failed: %s", self._target, error)

    def _start_checkpoint(self, snapshot) -> None:
        if self._checkpointing is not None and self._checkpointing.is_alive():
            return  # a later commit starts the next one
        from pyspark import InheritableThread

        self._checkpointing = InheritableThread(target=self._checkpoint, args=(snapshot,),
                                                name="ingest-checkpoint", daemon=True)
        self._checkpointing.start()

    def _checkpoint(self, snapshot) -> None:
        try:
            self._session.sparkContext.setJobGroup(CHECKPOINT_JOB_GROUP, "ingest: the target's checkpoint",
                                                   interruptOnCancel=False)
            write_checkpoint(self._session, self._log, snapshot)
        except Exception as error:  # Delta checkpoints at its own interval then
            log.debug("checkpointing %s failed: %s", self._target, error)
