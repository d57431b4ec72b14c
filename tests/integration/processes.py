"""`ingest run` as a separate process, so tests can crash it for real."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def write_pipeline(folder: Path, topic: str, name: str = "crashy", **overrides) -> Path:
    """A pipeline file over `topic`, its tables under `folder`."""
    document = {
        "name": name,
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                             "max_offsets_per_trigger": 500},
                   "format": "json",
                   "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"},
        "uid": {"header": "message-id"},
        "target": {"path": str(folder / "tables" / name)},
        "checkpoint": str(folder / "checkpoints" / name),
        "dead_letter": {"path": str(folder / "dead_letter" / name)},
    }
    for key, value in overrides.items():
        document[key] = {**document.get(key, {}), **value} if isinstance(value, dict) else value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class IngestProcess:
    """One `ingest run` in its own process group, its output in a log file."""

    def __init__(self, pipeline_file: Path | list[Path], bootstrap: str, log: Path, *, once: bool = True,
                 fault: str | None = None, extra_env: dict | None = None, extra_args: tuple[str, ...] = (),
                 prefix: tuple[str, ...] = ()):
        """`pipeline_file`: one file, or several for one application running them all; `prefix`:
        a command that execs the rest (a namespace of its own, `unshare ...`), so the pid stays ingest's."""
        env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "PYTHONUNBUFFERED": "1",
               **(extra_env or {})}
        env.pop("INGEST_FAULT", None)
        if fault:
            env["INGEST_FAULT"] = fault
            env["INGEST_FAULT_CONFIRM"] = "crash"  # armed on purpose (ingest.batch.commit.faults)
        files = [str(f) for f in (pipeline_file if isinstance(pipeline_file, list) else [pipeline_file])]
        command = [*prefix, sys.executable, "-m", "ingest", "run", *files, *(["--once"] if once else []),
                   *extra_args]
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"ingest run still running after {timeout}s; log:\n{self.output()[-3000:]}") from None

    def kill(self) -> None:
        """SIGKILL the Python driver and its JVM at once, as a machine crash would (the JVM
        has a process group of its own: ingest.platform.session.launch_jvm_apart)."""
        for group in [self.process.pid, *child_groups(self.process.pid)]:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=30)

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def signal_group(self, number: int) -> None:
        """What `timeout`, container inits and a terminal's Ctrl-C do: the signal to the group."""
        os.killpg(self.process.pid, number)

    def signal_every_process(self, number: int) -> None:
        """What systemd's default KillMode=control-group does: the signal to every process
        of the unit, the JVM's group too."""
        for group in [*child_groups(self.process.pid), self.process.pid]:
            os.killpg(group, number)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def child_groups(pid: int) -> set[int]:
    """The process groups of `pid`'s children that are not its own group."""
    groups = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        parent, group = int(fields[1]), int(fields[2])
        if parent == pid and group != pid:
            groups.add(group)
    return groups


def wait_for(condition, timeout: float, what: str, details=lambda: "", poll: float = 0.2):
    """`condition()`'s first true value; on timeout, fails with `details()` (a log's tail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{details()}")
