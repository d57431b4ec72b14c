"""The lease a killed run leaves behind, as a restarted container or a new pod meets it.

Real processes hold the lease and are SIGKILLed, as the OOM killer kills them. A container
the kubelet restarts has the same host name and a fresh pid namespace: its `ingest` is PID
1 again, as the dead holder was. A new pod has a new host name: whether the holder lives
cannot be asked from there, only read from its heartbeat. Namespaces come from `unshare`
(root, as CI runs). STALE_AFTER_S is shortened in the children to keep the test short; the
rule is the same at 30 s."""

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


def test_a_restarted_container_takes_over_the_lease_its_killed_predecessor_left(tmp_path):
    lease = tmp_path / LEASE_FILE
    first = holder(tmp_path, 60, in_container())
    held(first, lease)
    assert json.loads(lease.read_text())["pid"] == 1
    first.kill()
    first.wait(10)
    deadline = time.monotonic() + 5  # the child's death signal is delivered as unshare dies
    while holders_alive(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not holders_alive(tmp_path), "the killed container's process still runs"
    # a restart takes the kubelet more than the second the lease's `since` is rounded to
    since = datetime.strptime(json.loads(lease.read_text())["since"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    time.sleep(max(since + 1.5 - time.time(), 0))
    again = holder(tmp_path, 0, in_container())  # PID 1 again, the same host name
    out, _ = again.communicate(timeout=30)
    assert again.returncode == 0, out
    assert float(out.split("held after", 1)[1].split()[0]) < STALE_S, out  # not waited out: its pid is not the holder


def test_a_new_pod_waits_out_the_lease_of_a_killed_one_then_takes_it(tmp_path):
    lease = tmp_path / LEASE_FILE
    first = holder(tmp_path, 60, on_host("ingest-orders-old"))
    held(first, lease)
    first.kill()
    first.wait(10)
    killed_at = time.time()
    heartbeat = json.loads(lease.read_text())["heartbeat"]
    second = holder(tmp_path, 0, on_host("ingest-orders-new"))
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    assert "note: orders: the lease is held by host ingest-orders-old" in out
    assert "waiting up to" in out
    assert time.time() - heartbeat >= STALE_S  # taken only once stale
    assert time.time() - killed_at < STALE_S + 10, out
    assert not lease.exists()  # the second copy held it, then gave it back


def test_a_new_pod_is_refused_while_the_holder_on_another_host_lives(tmp_path):
    lease = tmp_path / LEASE_FILE
    first = holder(tmp_path, 30, on_host("ingest-orders-old"))
    held(first, lease)
    try:
        second = holder(tmp_path, 0, on_host("ingest-orders-new"))
        out, _ = second.communicate(timeout=30)
    finally:
        first.kill()
        first.wait(10)
    assert second.returncode == 1, out
    assert "already running (host ingest-orders-old" in out
    assert float(out.split("refused after", 1)[1].split()[0]) < STALE_S, out  # the heartbeat moved: no wait out


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
