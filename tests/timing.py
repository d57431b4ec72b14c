"""Where the suite's time goes, test by test.

`INGEST_DURATIONS=FILE make test` (or pytest) writes a JSON file with each
test's wall time split into what it paid for:

- `spark_start`, `broker_start`: the session fixtures' start-ups, charged to
  the test that first asked for them;
- `child_processes`: waiting on a child process (`ingest run`, the demo, the
  CLI) in the test's own thread: each of those pays a JVM start of its own;
- `sleeping`: `time.sleep` in the test's own thread, i.e. polling for a
  condition (`processes.wait_for`) or a clock;
- `work`: the rest (Spark jobs in this process, the broker, assertions).

`python -m tests.timing FILE` prints the split by file and the slowest tests
as the Markdown tables CONTRIBUTING.md quotes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest

_SPLIT = ("spark_start", "broker_start", "child_processes", "sleeping")


class SuiteClock:
    """Charges the main thread's waits to the test that runs now."""

    def __init__(self, out: Path):
        self.out = out
        self.tests: dict[str, dict[str, float]] = {}
        self.current: dict[str, float] | None = None
        self._inside = False  # a wait inside another (Popen.wait's own sleeps) counts once
        self._patched: list[tuple[object, str, object]] = []

    def install(self) -> None:
        self._wrap(time, "sleep", "sleeping")
        self._wrap(subprocess.Popen, "wait", "child_processes")
        self._wrap(subprocess.Popen, "communicate", "child_processes")

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)

    def _wrap(self, owner, name: str, category: str) -> None:
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            if clock._inside or clock.current is None or threading.current_thread() is not threading.main_thread():
                return original(*args, **kwargs)
            clock._inside, started = True, time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                clock._inside = False
                clock.current[category] += time.monotonic() - started

        self._patched.append((owner, name, original))
        setattr(owner, name, timed)

    def charge(self, category: str, seconds: float) -> None:
        if self.current is not None:
            self.current[category] += seconds

    def start(self, nodeid: str) -> None:
        self.current = self.tests.setdefault(nodeid, defaultdict(float))

    def finish(self, report) -> None:
        self.tests[report.nodeid]["total"] += report.duration
        if report.when == "teardown":
            self.current = None

    def write(self) -> None:
        rows = []
        for nodeid, figures in self.tests.items():
            split = {k: round(figures.get(k, 0.0), 2) for k in _SPLIT}
            total = round(figures.get("total", 0.0), 2)
            rows.append({"test": nodeid, "total": total, **split,
                         "work": round(max(total - sum(split.values()), 0.0), 2)})
        rows.sort(key=lambda row: -row["total"])
        self.out.write_text(json.dumps({"tests": rows}, indent=1) + "\n")


CLOCK: SuiteClock | None = None


def configure(out: str | None) -> None:
    global CLOCK
    if out:
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # under pytest-xdist: a file per worker, merged at the end
        CLOCK = SuiteClock(Path(f"{out}.{worker}" if worker else out))
        CLOCK.install()


def _merge_workers(out: Path) -> None:
    """The controller of an xdist run runs no test: its file is the workers' files together."""
    parts = sorted(out.parent.glob(f"{out.name}.gw*"))
    if not parts:
        return
    rows = [row for part in parts for row in json.loads(part.read_text())["tests"]]
    rows.sort(key=lambda row: -row["total"])
    out.write_text(json.dumps({"tests": rows}, indent=1) + "\n")
    for part in parts:
        part.unlink()


@contextmanager
def paid(category: str):
    """A session fixture's start-up, charged to the test that asked for it first
    (its own polling sleeps included, not counted again as sleeping)."""
    if CLOCK is None or CLOCK._inside:
        yield
        return
    CLOCK._inside, started = True, time.monotonic()
    try:
        yield
    finally:
        CLOCK._inside = False
        CLOCK.charge(category, time.monotonic() - started)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if CLOCK is not None:
        CLOCK.start(item.nodeid)
    yield


def pytest_runtest_logreport(report):
    if CLOCK is not None and report.nodeid in CLOCK.tests:
        CLOCK.finish(report)


def pytest_sessionfinish(session):
    if CLOCK is not None:
        CLOCK.uninstall()
        CLOCK.write()
        if "PYTEST_XDIST_WORKER" not in os.environ:
            _merge_workers(CLOCK.out)


def render(path: Path, slowest: int = 20) -> str:
    rows = json.loads(path.read_text())["tests"]
    columns = ("total", *_SPLIT, "work")
    by_file: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        figures = by_file[row["test"].split("::")[0]]
        figures["tests"] += 1
        for column in columns:
            figures[column] += row[column]
    whole = {c: sum(f[c] for f in by_file.values()) for c in ("tests", *columns)}

    def line(name: str, figures) -> str:
        cells = [f"{figures[c]:.0f}" for c in columns]
        return f"| {name} | {int(figures['tests'])} | " + " | ".join(cells) + " |"

    header = ("| file | tests | total s | Spark start | broker start | child processes | sleeping | work |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    files = sorted(by_file.items(), key=lambda item: -item[1]["total"])
    table = [header, line("**all**", whole), *(line(name, figures) for name, figures in files)]
    slow = ["| test | s | child processes | sleeping |", "| --- | ---: | ---: | ---: |"]
    slow += [f"| {r['test']} | {r['total']:.0f} | {r['child_processes']:.0f} | {r['sleeping']:.0f} |"
             for r in rows[:slowest]]
    return "\n".join(table) + "\n\n" + "\n".join(slow) + "\n"


if __name__ == "__main__":
    print(render(Path(sys.argv[1])))
