"""The order in which `make test`'s two workers take the suite's units: the longest first.

pytest-xdist's `--dist loadfile` hands out files by their number of tests, most first. The
suite's slowest files have one to three tests each (a crash harness, the first-pipeline guide,
a whole database), so they came last, and one worker ran a file of minutes alone while the
other had finished. Here each unit is weighed in seconds and the heaviest go first (the
classic longest-first rule: the end is filled with short units, on both workers).

A unit is a file (its tests stay on one worker, so a module's fixture is built once), but:
- the three files that read one `ingest demo` of the installed wheel are one unit, so the wheel
  is built and the demo runs once;
- the files in `SPLIT_BY_TEST` have no module fixture and a few long tests: each test is a
  unit, so both workers share them (the matrix alone is minutes of one worker's time).

A unit's weight is what the last `make test` recorded for it (INGEST_DURATIONS, tests/timing.py),
else what `SLOWEST` says, else an estimate from its number of tests.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

SHARING_THE_DEMO = ("tests/integration/test_demo.py", "tests/integration/test_notebooks.py",
                    "tests/integration/test_wheel.py")
SPLIT_BY_TEST = ("tests/integration/test_matrix.py", "tests/integration/test_crash_harness.py")

# Seconds of a worker's time, for a clone without a recorded run: the units whose number of
# tests says too little of their weight. Rough, and only their order matters: the slowest tests
# of the last full run on an idle machine (2026-12-02: the S3 crash harness 167 s, the demo's
# set-up 155 s, the guide 126 s, the 30-table database 117 s, the CDC crash 113 s, a matrix cell
# 58-68 s); test_applications.py alone at load 12, 138 s, halved; the rest estimated.
SLOWEST: dict[str, float] = {
    SHARING_THE_DEMO[0]: 300,  # the wheel built and installed, the demo, its checks, five notebooks
    "tests/integration/test_crash_harness.py::test_exactly_once_through_crashes_on_s3": 170,
    "tests/integration/test_crash_harness.py::test_exactly_once_through_crashes": 150,
    "tests/integration/test_crash_harness.py::test_a_tombstone_pipeline_is_exact_through_crashes_and_lost_ranges": 90,
    "tests/integration/test_whole_database.py": 200,  # the 30 tables and four shorter tests
    "tests/integration/test_first_pipeline.py": 126,
    "tests/integration/test_cdc_crash.py": 113,
    "tests/integration/test_applications.py": 70,
    # each cell (a parametrized test: its weight stands for every parameter)
    "tests/integration/test_matrix.py::test_every_kind_is_exact_through_crashes_a_lost_checkpoint_and_a_replay": 60,
}
# Per test, where nothing better is known: an integration test runs Spark jobs against the
# broker, a Spark test a few jobs, a unit test none.
PER_TEST = {"tests/integration/": 12.0, "tests/spark/": 4.0}
PER_UNIT_TEST = 0.05


def unit_of(nodeid: str) -> str:
    file = nodeid.split("::", 1)[0]
    if file in SHARING_THE_DEMO:
        return SHARING_THE_DEMO[0]
    if file in SPLIT_BY_TEST:
        return nodeid
    return file


def estimate(unit: str, tests: int) -> float:
    for known in (unit, unit.split("[", 1)[0]):
        if known in SLOWEST:
            return SLOWEST[known]
    per_test = next((seconds for folder, seconds in PER_TEST.items() if unit.startswith(folder)), PER_UNIT_TEST)
    return per_test * tests


def recorded(durations: str | None) -> dict[str, float]:
    """Seconds per unit in a durations file of tests/timing.py, {} where there is none."""
    if not durations or not Path(durations).is_file():
        return {}
    try:
        rows = json.loads(Path(durations).read_text())["tests"]
    except (ValueError, KeyError, OSError):
        return {}
    seconds: dict[str, float] = {}
    for row in rows:
        unit = unit_of(row["test"])
        own = float(row["total"]) - float(row.get("spark_start", 0)) - float(row.get("broker_start", 0))
        seconds[unit] = seconds.get(unit, 0.0) + own  # a worker's start-ups: charged to its first test
    return seconds


def longest_first(units: dict[str, dict[str, bool]], known: dict[str, float]) -> list[str]:
    weight = {unit: known.get(unit, estimate(unit, len(tests))) for unit, tests in units.items()}
    return sorted(units, key=lambda unit: -weight[unit])


class LongestFirstScheduling(LoadFileScheduling):
    """`--dist loadfile` with the units above, handed out longest first."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:
        if not self._ordered:  # the first assignment: xdist has just filled its queue
            known = recorded(os.environ.get("INGEST_DURATIONS"))
            self.workqueue = OrderedDict((unit, self.workqueue[unit])
                                         for unit in longest_first(self.workqueue, known))
            self._ordered = True
        super()._assign_work_unit(node)
