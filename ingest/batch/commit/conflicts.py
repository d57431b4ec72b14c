"""Delta write conflicts: the one place a batch's commit is retried.

Another writer on the same table (OPTIMIZE, VACUUM, Databricks auto-compaction
or predictive optimization, delta-rs) can make a MERGE or an append fail Delta's
conflict check. The commit did not happen, so trying again is safe; and should
the first attempt have committed after all, the idempotent transaction id makes
the retry a no-op. Only these typed conflicts are retried, a bounded number of
times with growing pauses; every other error fails the batch as before (the
restart from the checkpoint is the retry for those).

`ConcurrentTransactionException` is not retried: it means a second writer uses
this pipeline's own transaction app id, which the lease is there to prevent.
"""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Callable, TypeVar

from ingest.errors import IngestError, Retriable, first_line

log = logging.getLogger("ingest.run")

T = TypeVar("T")

# The conflicts Delta raises when another writer committed between our read and our commit.
CONFLICT_NAMES = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "DeltaConcurrentModificationException",
)
# Delta names the JVM class in the text of the error it raises (io.delta.exceptions.X or
# org.apache.spark.sql.delta.X); a conflict wrapped by another exception is still found.
_NAMED = re.compile(r"\b(?:io\.delta\.exceptions|org\.apache\.spark\.sql\.delta)\.(\w+Exception)\b")

ATTEMPTS = 8
FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 15.0


class WriteConflict(IngestError, Retriable):
    """A commit lost Delta's conflict check to another writer; it may succeed if tried again."""

    def __init__(self, kind: str, cause: BaseException):
        self.kind, self.cause = kind, cause
        super().__init__(f"{kind}: {first_line(cause)}")


class PersistentConflict(IngestError):
    """A commit still conflicted after every attempt."""


def conflict_of(error: BaseException) -> WriteConflict | None:
    """The error as a retriable conflict, or None if it is anything else."""
    for kind in _python_classes():
        if isinstance(error, kind):
            return WriteConflict(kind.__name__, error)
    text = f"{type(error).__name__}: {error}"
    for name in _NAMED.findall(text) + [type(error).__name__]:
        if name in CONFLICT_NAMES:
            return WriteConflict(name, error)
    return None


def retry_conflicts(action: Callable[[], T], what: str, attempts: int = ATTEMPTS,
                    first_pause_s: float = FIRST_PAUSE_S, sleep=time.sleep) -> T:
    """`action()`, tried again after each Delta conflict, at most `attempts` times in all."""
    kinds: list[str] = []
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except Exception as error:
            conflict = conflict_of(error)
            if not isinstance(conflict, Retriable):
                raise
            kinds.append(conflict.kind)
            if attempt == attempts:
                raise PersistentConflict(
                    f"{what}: still conflicting with another writer after {attempts} attempts "
                    f"({_tally(kinds)}); last: {conflict}. Another job keeps rewriting the table: "
                    f"pause its OPTIMIZE/VACUUM/compaction or schedule it between runs") from error
            pause = min(LONGEST_PAUSE_S, first_pause_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            log.warning("%s: write conflict %s (attempt %d of %d), retrying in %.1fs: %s",
                        what, conflict.kind, attempt, attempts, pause, first_line(error))
            sleep(pause)
    raise AssertionError("unreachable")


def _python_classes():
    # Importing delta.exceptions also installs Delta's translation of the JVM's
    # conflict exceptions into these Python classes.
    import delta.exceptions as delta_errors

    return tuple(getattr(delta_errors, name) for name in CONFLICT_NAMES)


def _tally(kinds: list[str]) -> str:
    return ", ".join(f"{kind} x{kinds.count(kind)}" for kind in dict.fromkeys(kinds))

