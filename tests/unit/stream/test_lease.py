"""The lease a killed run leaves behind, as a restarted container or a new pod meets it.

Real processes hold the lease and are SIGKILLed, as the OOM killer kills them. A container
the kubelet restarts has the same host name and a fresh pid namespace: its `ingest` is PID
1 again, as the dead holder was. A new pod has a new host name. From neither can the holder's
process be looked up, only its heartbeat read: the successor waits the lease out, and a
live holder's heartbeat refuses it. Namespaces come from `unshare` (root, as CI runs).
STALE_AFTER_S is shortened in the children to keep the test short; the rule is the same at
30 s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from ingest.stream.lease import LEASE_FILE

STALE_S = 6.0
HOLD = """
import sys, time
from ingest.stream import lease
lease.STALE_AFTER_S, lease.HEARTBEAT_S = {stale}, 1.0
held = lease.Lease("orders", sys.argv[1], on_note=lambda text: print("note:", text, flush=True))
started = time.monotonic()
try:
    held.acquire()
except lease.AlreadyRunning as error:
    print("refused after", round(time.monotonic() - started, 1), error, flush=True)
    sys.exit(1)
print("held after", round(time.monotonic() - started, 1), flush=True)
time.sleep(float(sys.argv[2]))
held.release()
"""


def unshared(*how: str) -> list[str]:
    assert shutil.which("unshare"), "unshare (util-linux) is needed: the containers' namespaces"
    if os.geteuid() == 0:
        return ["unshare", *how]
    return ["unshare", "--user", "--map-root-user", *how]


def holder(checkpoint: Path, seconds: float, namespace: list[str]) -> subprocess.Popen:
    code = HOLD.format(stale=STALE_S)
    return subprocess.Popen([*namespace, sys.executable, "-c", code, str(checkpoint), str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])})


def on_host(name: str) -> list[str]:
    """A process whose host name is `name`, as a pod's (a UTS namespace of its own)."""
    return [*unshared("--uts"), "sh", "-c", f'hostname {name} && exec "$@"', "sh"]


def in_container() -> list[str]:
    """A process that is PID 1 of a pid namespace of its own, as a container's entry point."""
    # --kill-child: a SIGKILL to unshare reaches its PID 1 child, and the namespace dies with it
    return unshared("--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc")


def holders_alive(checkpoint: Path) -> list[str]:
    """The lease-holding children still running for this checkpoint, from /proc."""
    alive = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if str(checkpoint).encode() in words and b"-c" in words:
            alive.append(cmdline.parent.name)
    return alive


def held(process: subprocess.Popen, lease: Path) -> None:
    line = process.stdout.readline()
    assert line.startswith("held"), line + process.stdout.read()
    assert lease.exists()


# (where the dead holder ran, where its successor runs, how the note places the holder)
SUCCESSORS = {
    "a new pod": (on_host("ingest-orders-old"), on_host("ingest-orders-new"), "on another host"),
    "a restarted container": (in_container(), in_container(), "in another container"),
}


def killed(process: subprocess.Popen, checkpoint: Path) -> None:
    """SIGKILL, as the OOM killer's; with --kill-child a container's PID 1 dies with unshare."""
    process.kill()
    process.wait(10)
    deadline = time.monotonic() + 5  # the child's death signal is delivered as unshare dies
    while holders_alive(checkpoint) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not holders_alive(checkpoint), "the killed holder still runs"


@pytest.mark.parametrize("successor", SUCCESSORS)
def test_the_successor_of_a_killed_holder_waits_out_its_lease_then_takes_it(tmp_path, successor):
    dead_in, new_in, where = SUCCESSORS[successor]
    lease = tmp_path / LEASE_FILE
    first = holder(tmp_path, 60, dead_in)
    held(first, lease)
    holder_was = json.loads(lease.read_text())
    killed(first, tmp_path)
    killed_at = time.time()
    second = holder(tmp_path, 0, new_in)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    assert f"note: orders: the lease is held by host {holder_was['host']}, pid {holder_was['pid']}" in out
    assert f"{where}, its heartbeat" in out and "waiting up to" in out
    assert time.time() - holder_was["heartbeat"] >= STALE_S  # taken only once stale
    assert time.time() - killed_at < STALE_S + 10, out
    assert not lease.exists()  # the second copy held it, then gave it back


@pytest.mark.parametrize("successor", SUCCESSORS)
def test_a_copy_is_refused_while_a_holder_it_cannot_see_lives(tmp_path, successor):
    """A second container with the host name of the first (PID 1 in each) is a second copy."""
    live_in, new_in, _ = SUCCESSORS[successor]
    lease = tmp_path / LEASE_FILE
    first = holder(tmp_path, 30, live_in)
    held(first, lease)
    time.sleep(1.5)  # the second copy starts later than the whole second the lease's `since` names
    try:
        second = holder(tmp_path, 0, new_in)
        out, _ = second.communicate(timeout=30)
    finally:
        killed(first, tmp_path)
    assert second.returncode == 1, out
    assert "already running (host" in out
    assert float(out.split("refused after", 1)[1].split()[0]) < STALE_S, out  # the heartbeat moved: no wait out


def test_a_holder_pid_now_taken_by_a_later_process_is_taken_over_at_once(tmp_path):
    """On this host and in this pid namespace: the pid the lease names runs, but it started
    after the lease was taken, so it is not the holder (a pid reused after the holder died)."""
    from ingest.platform.processes import pid_namespace
    from ingest.stream.lease import Lease

    later = subprocess.Popen(["sleep", "30"])
    try:
        an_hour_ago = time.time() - 3600
        (tmp_path / LEASE_FILE).write_text(json.dumps({
            "host": os.uname().nodename, "pid": later.pid, "token": "dead",
            "since": datetime.fromtimestamp(an_hour_ago).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z"),
            "heartbeat": time.time(), "pid_ns": pid_namespace()}))
        successor = Lease("orders", str(tmp_path))
        started = time.monotonic()
        successor.acquire()
        assert time.monotonic() - started < 2
        successor.release()
    finally:
        later.kill()
        later.wait(5)


def test_a_second_lease_in_one_process_is_still_refused(tmp_path):
    """The holder's pid is this process, started before the lease: alive, not a predecessor."""
    from ingest.stream.lease import AlreadyRunning, Lease

    first = Lease("orders", str(tmp_path))
    first.acquire()
    try:
        with pytest.raises(AlreadyRunning):
            Lease("orders", str(tmp_path)).acquire()
    finally:
        first.release()
