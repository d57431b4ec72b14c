"""One running copy per checkpoint: a lease file with a heartbeat.

A second copy started while the first runs fails fast, naming the running
copy (host, pid, since). A lease whose heartbeat stopped (a crashed run), or
whose process is gone on this host, is stale and taken over; so is one whose
pid now belongs to a process started after the lease. From another host (a
new pod has a new host name) or another pid namespace (a container the kubelet
restarts after an OOM kill: same host name, and `ingest` is PID 1 again, as
the dead holder was) the holder's process cannot be seen: the new copy watches
the heartbeat, refused as soon as it moves, and takes the lease once it is
stale (a killed holder's, within STALE_AFTER_S), instead of failing into a
crash loop.

This lease is for checkpoints on a local or mounted file system, not those of a
Spark Connect server running apart (their paths are the server's). On an object
store that creates a file only if absent (S3 through S3A) the lease is
`store_lease.StoreLease`, taken once the session is up, with the same rules.
Where a store offers none, a second copy meets the target's txn id: Delta commits a batch version
once, and a copy whose MERGE Delta skipped compares the offsets recorded for
that batch with its own and stops when they differ (`ledger.check_skipped`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from ingest.errors import IngestError
from ingest.platform.files import local_path
from ingest.platform.processes import pid_namespace, process_alive, started_at

LEASE_FILE = "_ingest_lease.json"
HEARTBEAT_S = 5.0
STALE_AFTER_S = 30.0


class AlreadyRunning(IngestError):
    """Another live copy of the pipeline holds the checkpoint."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    since: str
    token: str
    heartbeat: float
    pid_ns: str = ""  # where `pid` means something: a container has a pid namespace of its own

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"


def visible(holder: Holder) -> bool:
    """Whether the holder's pid names a process this one can look up."""
    return holder.host == socket.gethostname() and holder.pid_ns == pid_namespace()


def _alive_here(holder: Holder) -> bool:
    if not visible(holder):
        return True  # cannot tell from here: trust the heartbeat
    started = started_at(holder.pid)
    if started is not None and started > _since(holder) + 1:
        return False  # its pid is another process's now (the holder's `since` has whole seconds)
    return process_alive(holder.pid)


def _since(holder: Holder) -> float:
    try:
        return datetime.strptime(holder.since, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return float("inf")  # unreadable: never taken for a predecessor


def live(holder: Holder) -> bool:
    """A holder whose heartbeat is recent and whose process, where it can be seen, still runs."""
    return time.time() - holder.heartbeat < STALE_AFTER_S and _alive_here(holder)


def new_holder() -> Holder:
    return Holder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%S%z"), uuid.uuid4().hex,
                  time.time(), pid_namespace())


def running(pipeline: str, holder: Holder) -> AlreadyRunning:
    return AlreadyRunning(f"{pipeline} is already running ({holder.describe()}); "
                          f"stop it first, or wait {STALE_AFTER_S:.0f}s if it crashed")


def wait_out(pipeline: str, holder: Holder, read: Callable[[], Holder | None],
             on_note: Callable[[str], None] | None) -> None:
    """Wait until the lease of a holder this copy cannot see is stale; refused when its
    heartbeat moves. At least two heartbeats long, so that clocks apart between two hosts
    cannot pass a live one."""
    age = time.time() - holder.heartbeat
    wait = max(STALE_AFTER_S - age, 2 * HEARTBEAT_S)
    if on_note is not None:
        where = "on another host" if holder.host != socket.gethostname() else "in another container"
        on_note(f"{pipeline}: the lease is held by {holder.describe()}, {where}, "
                f"its heartbeat {max(age, 0):.0f}s old; waiting up to {wait:.0f}s for it to go "
                f"stale (a holder that was killed, as by the OOM killer, beats no more), and "
                f"refused if it beats")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
        now = read()
        if now is None:
            return  # released
        if now.token != holder.token or now.heartbeat != holder.heartbeat:
            raise running(pipeline, now)


class Lease:
    def __init__(self, pipeline: str, checkpoint: str, on_note: Callable[[str], None] | None = None,
                 on_this_disk: bool = True):
        """`on_note` hears that this copy waits for the lease of a holder it cannot see.
        `on_this_disk=False`: the checkpoint is a remote Connect server's (`ingest run
        --remote sc://...`), where the run lives too: no lease on this machine's disk; the
        rerun ends the query a killed client left there (`stream.orphan_query`)."""
        self.pipeline = pipeline
        self.on_note = on_note
        self.folder = local_path(checkpoint) if on_this_disk else None
        self.me = new_holder()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path | None:
        return self.folder / LEASE_FILE if self.folder else None

    def acquire(self) -> None:
        if self.path is None:
            return
        holder = self._read()
        if holder and holder.token != self.me.token and live(holder):
            if visible(holder):
                raise running(self.pipeline, holder)
            wait_out(self.pipeline, holder, self._read, self.on_note)
        self._write()
        time.sleep(0.2)  # two copies starting together: the last writer wins, the other sees it
        holder = self._read()
        if holder is None or holder.token != self.me.token:
            raise AlreadyRunning(f"{self.pipeline} was started twice at once; "
                                 f"the other copy ({holder.describe() if holder else 'unknown'}) won")
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.pipeline}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder = self._read() if self.path else None
        if holder is not None and holder.token == self.me.token:
            self.path.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            holder = self._read()
            if holder is None or holder.token == self.me.token:
                self._write()

    def _read(self) -> Holder | None:
        try:
            return Holder(**json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {**self.me.__dict__, "heartbeat": time.time()}
        temporary = self.path.with_suffix(f".{self.me.token}.tmp")
        temporary.write_text(json.dumps(record))
        os.replace(temporary, self.path)
