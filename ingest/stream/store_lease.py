"""One running copy per checkpoint on an object store: a lease file created only if absent.

Where the store's file system has a conditional create (S3 through S3A: `If-None-Match: *`
and `If-Match` on PutObject), the lease beside the checkpoint is created only if absent and
rewritten by its holder every heartbeat only if unchanged since its own last write (its
ETag). The local lease's expiry holds: a holder whose heartbeat is older than
`lease.STALE_AFTER_S`, or whose process is gone on this host, is taken over, by a replace
conditional on the ETag read, so of two copies taking over one wins. A holder whose lease
was taken over (it stalled past the expiry) finds its ETag changed at its next heartbeat
and stops writing the lease (`lost`).

The file operations are `ingest.delta.ConditionalFiles` (ingest's jar), through the session's
Hadoop configuration: the lease reaches the store with the credentials and endpoint the
tables do. It is taken once the session is up, after the local leases.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict
from typing import Any, Callable

from ingest.stream.lease import (
    HEARTBEAT_S,
    LEASE_FILE,
    AlreadyRunning,
    Holder,
    live,
    new_holder,
    running,
    visible,
    wait_out,
)


def _conditional_files(spark) -> Any | None:
    """ingest's conditional files in the session's JVM; None on Spark Connect or without the jar."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return None
    from py4j.java_gateway import JavaClass

    files = jvm.ingest.delta.ConditionalFiles  # a package object, not a class, when the jar is missing
    return files if isinstance(files, JavaClass) else None


def _file_system(spark, location: str):
    path = spark._jvm.org.apache.hadoop.fs.Path(location)
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def conditional_create(spark, location: str) -> bool | None:
    """Whether the store at `location` creates a file only if absent; None when this session
    cannot tell (Spark Connect, or no ingest jar)."""
    files = _conditional_files(spark)
    if files is None:
        return None
    path, fs = _file_system(spark, location)
    return bool(files.offered(fs, path))


class StoreLease:
    def __init__(self, pipeline: str, checkpoint: str, spark, on_note: Callable[[str], None] | None = None):
        """`on_note` hears that this copy waits for the lease of a holder it cannot see."""
        self.pipeline = pipeline
        self.on_note = on_note
        self.files = _conditional_files(spark)
        self.path, self.fs = _file_system(spark, f"{checkpoint.rstrip('/')}/{LEASE_FILE}")
        self.me = new_holder()
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        for _ in range(3):  # a lease released between the create and the read: create again
            taken = self.files.createIfAbsent(self.fs, self.path, self._record())
            if taken is not None:
                return self._hold(taken)
            there = self.files.read(self.fs, self.path)
            if there is None:
                continue
            holder = _holder(there[0])
            if holder is not None and holder.token != self.me.token and live(holder):
                if visible(holder):
                    raise running(self.pipeline, holder)
                # a new pod after an OOM kill: the dead holder's heartbeat goes stale, then take it
                wait_out(self.pipeline, holder, self._read, self.on_note)
                there = self.files.read(self.fs, self.path)
                if there is None:
                    continue
            taken = self.files.replaceIfMatch(self.fs, self.path, self._record(), there[1])
            if taken is None:
                raise AlreadyRunning(f"{self.pipeline} was started twice at once; the other copy won "
                                     f"the lease {self.path.toString()}")
            return self._hold(taken)
        raise AlreadyRunning(f"{self.pipeline}: the lease {self.path.toString()} changed under every attempt")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.etag is None or self.lost:
            return
        there = self.files.read(self.fs, self.path)
        holder = _holder(there[0]) if there is not None else None
        if holder is not None and holder.token == self.me.token:
            self.fs.delete(self.path, False)

    def _hold(self, etag: str) -> None:
        self.etag = etag
        self._thread = threading.Thread(target=self._beat, name=f"lease-{self.pipeline}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                etag = self.files.replaceIfMatch(self.fs, self.path, self._record(), self.etag)
            except Exception:  # the store unreachable for a beat: the next one tries again
                continue
            if etag is None:  # taken over after this copy stalled past the expiry
                self.lost = True
                return
            self.etag = etag

    def _read(self) -> Holder | None:
        there = self.files.read(self.fs, self.path)
        return _holder(there[0]) if there is not None else None

    def _record(self) -> bytearray:
        return bytearray(json.dumps({**asdict(self.me), "heartbeat": time.time()}).encode())


def _holder(text: str) -> Holder | None:
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):
        return None
