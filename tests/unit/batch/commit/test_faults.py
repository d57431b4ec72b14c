"""INGEST_FAULT arms only with INGEST_FAULT_CONFIRM=crash, and always says so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ingest.batch.commit import faults

PROBE = "from ingest.batch.commit import faults; print(faults._FAULT); print(faults.warning())"


def probe(**variables: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_FAULT")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **variables},
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_unset_is_silent():
    assert probe() == ["None", "None"]


def test_a_leftover_variable_arms_nothing_and_says_so():
    fault, warning = probe(INGEST_FAULT="after_target_commit:batch=1")
    assert fault == "None"
    assert warning.startswith("INGEST_FAULT=after_target_commit:batch=1 is set but NOT armed")
    assert "INGEST_FAULT_CONFIRM=crash" in warning


def test_confirmed_arms_it_loudly():
    fault, warning = probe(INGEST_FAULT="after_target_commit:batch=1", INGEST_FAULT_CONFIRM="crash")
    assert fault == "Fault(point='after_target_commit', batch=1, after_ms=300)"
    assert warning.startswith("FAULT INJECTION ARMED")


def test_any_other_confirmation_is_no_confirmation():
    assert not faults.confirmed({"INGEST_FAULT_CONFIRM": "yes"})
    assert faults.confirmed({"INGEST_FAULT_CONFIRM": "crash"})


def test_a_malformed_fault_is_refused_even_when_confirmed():
    with pytest.raises(faults.FaultSpecError):
        faults.parse("after_lunch")
