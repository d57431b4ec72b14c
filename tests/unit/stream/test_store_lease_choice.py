"""Which checkpoints get the lease on an object store, and what `run` says where none can be
taken (no JVM: a session without ingest's jar is one that cannot tell)."""

from __future__ import annotations

from ingest.stream.supervisor import Supervisor, _Running
from tests.unit.spec.test_locations import pipeline as make_pipeline


class KeptLease:
    def release(self):
        pass


def test_a_checkpoint_on_an_object_store_without_a_lease_is_said_at_start(monkeypatch):
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    notes: list[str] = []
    local = make_pipeline("local", "/data/t", "/data/cp")
    remote = make_pipeline("remote", "s3a://b/t", "s3a://b/cp")
    supervisor = Supervisor([local, remote], once=True, on_report=lambda r, c: None, on_note=notes.append)
    supervisor.spark = object()  # no JVM to reach the store with
    kept = KeptLease()
    supervisor.running = [_Running(local, kept, {}), _Running(remote, kept, {})]
    supervisor._store_leases()
    assert len(notes) == 1 and notes[0].startswith("remote: no lease on checkpoint s3a://b/cp")
    assert "second copy of this pipeline is not refused" in notes[0]
    assert all(run.lease is kept for run in supervisor.running)
