"""`run` refuses two pipelines on one target or checkpoint before it takes a lease (no JVM)."""

import pytest

from ingest.errors import SpecErrors
from ingest.stream.supervisor import Supervisor
from tests.unit.spec.test_locations import pipeline


def test_a_checkpoint_spelled_twice_is_refused_before_any_lease(tmp_path):
    first = pipeline("a", str(tmp_path / "t" / "a"), str(tmp_path / "cp"))
    second = pipeline("b", str(tmp_path / "t" / "b"), str(tmp_path / "cp") + "/")
    supervisor = Supervisor([first, second], once=True, on_report=print, on_note=print)
    with pytest.raises(SpecErrors) as raised:
        supervisor.claim()
    assert "same checkpoint as pipeline 'a'" in str(raised.value)
    assert supervisor.running == [] and not (tmp_path / "cp").exists()
