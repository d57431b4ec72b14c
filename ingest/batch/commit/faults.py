"""Fault points: the batch path kills its own process hard at a named point.

For testing exactly-once, ours and users' own deployments:

    INGEST_FAULT=after_target_commit:batch=3
    INGEST_FAULT=during_merge:batch=2:after_ms=400

Points: before_dead_letter, after_dead_letter, during_merge, after_target_commit, and
with a table per topic, between_tables (one table of the batch committed, another not yet).
`batch=N` picks the batch (default: the first one to reach the point). The
driver JVM is killed with SIGKILL, then this process: no cleanup runs, as in a
real crash. Read once at start; with INGEST_FAULT unset a point is one `is None`.

A variable left behind must not kill a production job, so INGEST_FAULT arms
nothing unless INGEST_FAULT_CONFIRM=crash is set as well; armed or refused,
`warning()` says so, and the faces print it loudly.

A second action, for tests that run the pipeline in their own process:
`raising(point, batch)` arms a point for the length of a with-block to raise
`InjectedFault` instead of killing (still only with INGEST_FAULT_CONFIRM=crash).
foreachBatch runs in the driver's Python process, so the raise fails the query
there, before Spark writes the batch's commit file: what is durable afterwards
(the Delta logs, the checkpoint's offsets without the batch's commit) is what a
SIGKILL at the same point leaves, for before_dead_letter, after_dead_letter,
after_target_commit and between_tables, each a point between two commits.
during_merge is not: a kill there lands inside Delta's commit, which a raise
around it cannot imitate, so it stays SIGKILL only (the subprocess harnesses).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from ingest.errors import IngestError

# Every batch passes these; a single-table pipeline never reaches between_tables.
BATCH_POINTS = ("before_dead_letter", "after_dead_letter", "during_merge", "after_target_commit")
POINTS = (*BATCH_POINTS, "between_tables")
CONFIRM_VARIABLE, CONFIRM_VALUE = "INGEST_FAULT_CONFIRM", "crash"


class FaultSpecError(IngestError):
    """INGEST_FAULT is not of the documented form."""


class InjectedFault(RuntimeError):
    """The raise a fault point armed with action "raise" throws (tests only)."""


@dataclass(frozen=True)
class Fault:
    point: str
    batch: int | None = None
    after_ms: int = 300
    action: str = field(default="kill", repr=False)  # kill: SIGKILL (INGEST_FAULT); raise: `raising`


def parse(text: str | None) -> Fault | None:
    if not text:
        return None
    name, *params = text.strip().split(":")
    if name not in POINTS:
        raise FaultSpecError(f"INGEST_FAULT: unknown point {name!r}; expected one of {', '.join(POINTS)}")
    values = {}
    for param in params:
        key, _, value = param.partition("=")
        if key not in ("batch", "after_ms") or not value.isdigit():
            raise FaultSpecError(f"INGEST_FAULT: {param!r} is not batch=N or after_ms=N")
        values[key] = int(value)
    return Fault(name, batch=values.get("batch"), after_ms=values.get("after_ms", Fault.after_ms))


def confirmed(environ=os.environ) -> bool:
    return environ.get(CONFIRM_VARIABLE) == CONFIRM_VALUE


def warning_for(text: str | None, is_confirmed: bool) -> str | None:
    """What to say about INGEST_FAULT; None when it is unset."""
    if not text:
        return None
    if not is_confirmed:
        return (f"INGEST_FAULT={text} is set but NOT armed: fault injection kills this process on "
                f"purpose and also needs {CONFIRM_VARIABLE}={CONFIRM_VALUE}; unset INGEST_FAULT "
                "if this is not a crash test")
    return (f"FAULT INJECTION ARMED (INGEST_FAULT={text}): this process will kill itself with "
            "SIGKILL at that point. Never set this in production.")


_TEXT = os.environ.get("INGEST_FAULT")
_FAULT = parse(_TEXT) if confirmed() else None


def warning() -> str | None:
    """The loud line for this process's INGEST_FAULT, armed or refused."""
    return warning_for(_TEXT, _FAULT is not None)
_jvm_pid: int | None = None


def arm(spark) -> None:
    """Remember the driver JVM, so a crash takes it down too (it would finish a commit)."""
    global _jvm_pid
    if _FAULT is not None and getattr(spark, "_jvm", None) is None:
        from ingest.platform.connect import refuse

        raise refuse(f"fault injection (INGEST_FAULT={_TEXT})")
    if _FAULT is not None:
        _jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())


def _crash() -> None:
    if _FAULT is not None and _FAULT.action == "raise":
        raise InjectedFault(f"injected fault at {_FAULT.point} (batch {_FAULT.batch})")
    if _jvm_pid is not None:
        os.kill(_jvm_pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _due(point: str, batch_id: int) -> bool:
    return _FAULT.point == point and (_FAULT.batch is None or _FAULT.batch == batch_id)


def point(name: str, batch_id: int) -> None:
    if _FAULT is not None and _due(name, batch_id):
        _crash()


@contextmanager
def raising(name: str, batch: int | None = None) -> Iterator[None]:
    """Arm `name` to raise InjectedFault in this process for the with-block's length
    (at batch `batch`, or the first batch to reach it); needs INGEST_FAULT_CONFIRM=crash."""
    global _FAULT
    if name not in POINTS or name == "during_merge":
        raise FaultSpecError(f"raising: {name!r} is not a point a raise can stand in for a kill at; "
                             f"expected one of {', '.join(p for p in POINTS if p != 'during_merge')}")
    if not confirmed():
        raise FaultSpecError(f"raising({name!r}) arms a fault point: set {CONFIRM_VARIABLE}={CONFIRM_VALUE}")
    saved, _FAULT = _FAULT, Fault(name, batch, action="raise")
    try:
        yield
    finally:
        _FAULT = saved


@contextmanager
def during(name: str, batch_id: int) -> Iterator[None]:
    """Crash `after_ms` into the block, while it is still running."""
    if _FAULT is None or not _due(name, batch_id):
        yield
        return
    timer = threading.Timer(_FAULT.after_ms / 1000, _crash)
    timer.daemon = True
    timer.start()
    yield
    _crash()  # the block finished first: crash right after it, still before the checkpoint
