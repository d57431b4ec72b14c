"""`SessionStart`: the session starts on a thread while the caller works; errors reach the caller."""

import threading

import pytest

from ingest.platform import session as session_module
from ingest.platform.builder import SessionError
from ingest.platform.session import SessionStart


def test_the_session_starts_while_the_caller_works(monkeypatch):
    caller_done, started_on = threading.Event(), []

    def slow_start(app_name, conf=None, local_conf=None):
        started_on.append(threading.current_thread().name)
        assert caller_done.wait(5), "the caller was blocked until the session had started"
        return f"session {app_name} {dict(local_conf or {})}"

    monkeypatch.setattr(session_module, "get_session", slow_start)
    # conf/<env>.yaml's `session:` reaches the session the thread starts
    starting = SessionStart("ingest-run", local_conf={"spark.driver.memory": "3g"})
    caller_done.set()  # the caller's own work (leases, preflight) ran before the session was there
    assert starting.result() == "session ingest-run {'spark.driver.memory': '3g'}"
    assert started_on == ["ingest-session-start"]


def test_a_failed_start_is_raised_to_the_caller(monkeypatch):
    def failing(app_name, conf=None, local_conf=None):
        raise SessionError("no JVM")

    monkeypatch.setattr(session_module, "get_session", failing)
    with pytest.raises(SessionError, match="no JVM"):
        SessionStart("ingest-run").result()
