"""The Python API's names and signatures, without Spark (the real runs: tests/integration/test_python_api.py)."""

from __future__ import annotations

import inspect

import ingest


def test_the_contract_names_are_there():
    for name in ("run", "start", "status", "verify", "configure_spark", "load", "RunFailed",
                 "SpecErrors", "IngestError", "__version__"):
        assert name in ingest.__all__ and hasattr(ingest, name), name
    assert issubclass(ingest.RunFailed, ingest.IngestError)


def test_public_signatures_are_typed():
    for function in (ingest.run, ingest.start, ingest.status, ingest.verify, ingest.load):
        signature = inspect.signature(function)
        assert signature.return_annotation is not inspect.Signature.empty, function.__name__
        untyped = [p.name for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty]
        assert not untyped, f"{function.__name__}: {untyped}"
    assert list(inspect.signature(ingest.run).parameters)[:4] == ["spark", "path", "env", "once"]


def test_run_failed_carries_batch_offsets_and_cause():
    cause = ValueError("boom")
    error = ingest.RunFailed("pipeline orders failed", pipeline="orders", batch_id=3,
                             offsets={"orders": {0: 42}}, cause=cause)
    assert (error.pipeline, error.batch_id, error.offsets, error.cause) == ("orders", 3, {"orders": {0: 42}}, cause)
