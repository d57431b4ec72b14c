"""A Spark Connect server that dies under `ingest run`: the run fails at once, naming the
server, instead of retrying every call for ten minutes (stand-ins here: no server, no JVM)."""

from __future__ import annotations

from types import SimpleNamespace

from ingest.platform.connect import is_connect, server_lost
from ingest.stream import supervisor as supervising
from ingest.stream.supervisor import Supervisor, _Running
from tests.unit.spec.test_locations import pipeline as make_pipeline
from tests.unit.stream.test_supervisor_failures import FakeLease

GRPC_TEXT = ('<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n'
             '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:15002: '
             'Failed to connect to remote host: Connection refused"\n\tdebug_error_string = "UNAVAILABLE:..."\n>')


class Unavailable(Exception):
    """What pyspark's Connect client raises once its retries ran out (SparkConnectGrpcException)."""

    def getGrpcStatusCode(self):
        return SimpleNamespace(name="UNAVAILABLE")


class ConnectSession:
    def __init__(self):
        self.closed = False
        self.client = SimpleNamespace(close=lambda: setattr(self, "closed", True))

    @property
    def is_stopped(self) -> bool:
        return self.closed


ConnectSession.__module__ = "pyspark.sql.connect.session"  # what is_connect reads


class QueryOnADeadServer:
    def __init__(self):
        self.calls = 0

    def _call(self):
        self.calls += 1
        raise Unavailable(GRPC_TEXT)

    def awaitTermination(self, seconds):
        self._call()

    @property
    def isActive(self):
        return self._call()


def test_a_lost_server_fails_the_run_once_naming_it(monkeypatch):
    monkeypatch.setattr(supervising, "_STOP_GRACE_S", 0.0)
    pipeline = make_pipeline("orders", "/t/orders", "/cp/orders")
    run = Supervisor([pipeline], once=True, on_report=lambda *_: None, on_note=lambda _: None)
    run.spark = ConnectSession()
    assert is_connect(run.spark)
    run.running = [_Running(pipeline, FakeLease(), {}, query=QueryOnADeadServer())]

    [outcome] = run.wait(poll_s=0.01)

    assert outcome.error == ("pipeline orders: the Spark Connect server stopped answering under the run "
                             "(failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:15002: "
                             "Failed to connect to remote host: Connection refused); the next run resumes "
                             "from the checkpoint")
    # one call waited out the retries; stopping the query would have waited them out again
    assert run.running[0].query.calls == 1
    assert run.spark.closed  # pyspark's exit would otherwise try to release the session there


def test_only_an_unreachable_server_counts_as_lost():
    assert server_lost(Unavailable(GRPC_TEXT))
    assert not server_lost(RuntimeError("UNAVAILABLE"))
