"""Whether a process runs on this machine: for a lease whose holder may be gone, and
for what a killed run left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether a process of this number runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def started_at(pid: int) -> float | None:
    """When the process of this number started (Unix time), from Linux's /proc; None where
    that cannot be read (another system, a process gone)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])  # btime has whole seconds
    except (OSError, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def pid_namespace() -> str:
    """This process's pid namespace (a container has one of its own), e.g. `pid:[4026531836]`;
    "" where Linux's /proc does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
