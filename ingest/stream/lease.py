"""One running copy per checkpoint: a lease file with a heartbeat.

A second copy started while the first runs fails fast, naming the running
copy (host, pid, since). A lease whose heartbeat stopped (a crashed run), or
whose process is gone on this host, is stale and taken over.

Only checkpoints on a local or mounted file system get a lease, and not those of a
Spark Connect server running apart (their paths are the server's). On object
stores a second copy meets the target's txn id: Delta commits a batch version
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
from pathlib import Path

from ingest.errors import IngestError
from ingest.platform.files import local_path
from ingest.platform.processes import process_alive

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

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"


def _alive_here(holder: Holder) -> bool:
    if holder.host != socket.gethostname():
        return True  # cannot tell from here: trust the heartbeat
    return process_alive(holder.pid)


class Lease:
    def __init__(self, pipeline: str, checkpoint: str, on_this_disk: bool = True):
        """`on_this_disk=False`: the checkpoint is a remote Connect server's (`ingest run
        --remote sc://...`), where the run lives too: no lease on this machine's disk; the
        rerun's query stops the one a killed client left (Spark's stopActiveRunOnRestart)."""
        self.pipeline = pipeline
        self.folder = local_path(checkpoint) if on_this_disk else None
        self.me = Holder(socket.gethostname(), os.getpid(),
                         time.strftime("%Y-%m-%dT%H:%M:%S%z"), uuid.uuid4().hex, time.time())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> Path | None:
        return self.folder / LEASE_FILE if self.folder else None

    def acquire(self) -> None:
        if self.path is None:
            return
        holder = self._read()
        if holder and holder.token != self.me.token and self._live(holder):
            raise AlreadyRunning(f"{self.pipeline} is already running ({holder.describe()}); "
                                 f"stop it first, or wait {STALE_AFTER_S:.0f}s if it crashed")
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

    def _live(self, holder: Holder) -> bool:
        return time.time() - holder.heartbeat < STALE_AFTER_S and _alive_here(holder)

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
