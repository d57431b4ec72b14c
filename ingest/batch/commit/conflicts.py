"""Delta write conflicts: the one place a batch's commit is retried.

Another writer on the same table (OPTIMIZE, VACUUM, Databricks auto-compaction
or predictive optimization, delta-rs) can make a MERGE or an append fail Delta's
conflict check. The commit did not happen, so trying again is safe; and should
the first attempt have committed after all, the idempotent transaction id makes
the retry a no-op. Only these typed conflicts are retried, a bounded number of
times with growing pauses; every other error fails the batch as before (the
restart from the checkpoint is the retry for those).

`ConcurrentTransactionException` means a second writer uses this pipeline's own
transaction app id. On a classic session it is not retried: the lease is there to
prevent it, and a second copy fails. On Spark Connect the lease is the client's,
while the query lives on the server: a query whose client was killed goes on, and its
last batch (inside its Python worker) can still commit under the app id after the
rerun stopped that query. There it is retried: the retry finds the batch committed and
Delta skips it, and the processor compares the committed range with its own
(`ledger.check_skipped`), so a different range still stops the run.

Conflicts are told by their Python classes (`delta.exceptions`, and on Connect
`delta.connect.exceptions`, which maps the server's error to them), else by the JVM
class named in the error's text.
"""

from __future__ import annotations

import logging
import random
import re
import sys
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
    if _own_app_id_on_connect(error):
        return WriteConflict(OWN_APP_ID, error)
    text = f"{type(error).__name__}: {error}"
    for name in _NAMED.findall(text) + [type(error).__name__]:
        if name in CONFLICT_NAMES:
            return WriteConflict(name, error)
    return None


def retry_conflicts(action: Callable[[], T], what: str, attempts: int = ATTEMPTS,
                    first_pause_s: float = FIRST_PAUSE_S, sleep=time.sleep) -> T:
    """`action()`, tried again after each Delta conflict, at most `attempts` times in all."""
    kinds: list[str] = []
    _connect_translation()
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


OWN_APP_ID = "ConcurrentTransactionException"


def _python_classes():
    # Importing delta.exceptions installs Delta's translation of the JVM's conflict
    # exceptions into these Python classes; delta.connect.exceptions does the same for a
    # Connect server's errors (subclasses of the same base classes).
    import delta.exceptions.base as delta_errors

    return tuple(getattr(delta_errors, name) for name in CONFLICT_NAMES)


def _connect_translation() -> None:
    """Where this process is a Connect client (the `ingest run --remote` client, the
    batches' worker beside the server): Delta's translation of the server's conflicts,
    installed before the call that may raise one. Not imported otherwise: the Connect
    client's modules are not on a classic run's path."""
    if "pyspark.sql.connect.session" not in sys.modules:
        return
    try:
        import delta.connect.exceptions  # noqa: F401  (registers the translation on import)
    except ImportError:  # a Delta without Connect support: the error text is read instead
        pass


def _own_app_id_on_connect(error: BaseException) -> bool:
    """A Connect server's `ConcurrentTransactionException` (module docstring: why only there)."""
    import delta.exceptions.base as delta_errors

    if not isinstance(error, delta_errors.ConcurrentTransactionException):
        return "DELTA_CONCURRENT_TRANSACTION" in str(error) and _from_connect(error)
    return _from_connect(error)


def _from_connect(error: BaseException) -> bool:
    return type(error).__module__.startswith(("pyspark.errors.exceptions.connect", "delta.connect"))


def _tally(kinds: list[str]) -> str:
    return ", ".join(f"{kind} x{kinds.count(kind)}" for kind in dict.fromkeys(kinds))

