"""Whether a process runs on this machine: for a lease whose holder may be gone, and
for what a killed run left behind."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process of this number runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
