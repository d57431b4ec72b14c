"""The package as a user gets it: the wheel built, installed into a fresh venv, run
(the session fixture `installed_wheel`, tests/integration/conftest.py).

Its demo is the one the demo and notebook tests read (`demo_run`): the demo runs once
per suite, from the installed package. Marked `wheel`: `pytest -m "not wheel"` leaves
out this test's own checks (the demo tests still build and install the wheel).
"""

from __future__ import annotations

import pytest


@pytest.mark.wheel
def test_the_wheel_installs_validates_and_runs_the_demo(installed_wheel, demo_run):
    assert installed_wheel.version.returncode == 0, installed_wheel.version.stderr[-3000:]
    assert installed_wheel.version.stdout.strip().startswith("ingest ")
    # the user's folder: no checkout, no conf/, the package's code only
    assert (installed_wheel.validate.returncode, installed_wheel.validate.stdout) == (0, "OK pipelines/clicks.yml\n")

    # Without the spark extra: a message and exit 2, not an ImportError.
    no_spark = installed_wheel.status_without_spark
    assert (no_spark.returncode, no_spark.stdout) == (2, "")
    assert "pip install 'ingest[spark]'" in no_spark.stderr and "Traceback" not in no_spark.stderr
    strict = installed_wheel.validate_strict
    assert strict.returncode == 2 and "--strict" in strict.stderr

    # with it: the demo, from the user's folder
    assert demo_run.exit_code == 0, demo_run.output[-3000:]
    assert "exactly once: every uid once, nothing missing" in demo_run.output
    assert "FAULT INJECTION ARMED" in (demo_run.root / "logs" / "run-1.log").read_text()
