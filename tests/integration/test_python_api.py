"""The Python API as a notebook uses it: the caller's session, the real broker, Spark and Delta."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import ingest
from tests.integration.processes import wait_for, write_pipeline
from tests.integration.test_cli_run import send_orders


@pytest.fixture
def bootstrap(kafka, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)  # the pipeline files read ${KAFKA_BOOTSTRAP}
    return kafka.bootstrap


def test_run_status_verify_as_a_notebook_does(spark, kafka, topic, tmp_path, bootstrap):
    send_orders(kafka, topic, 10)  # 10 orders and one malformed record
    pipeline_file = write_pipeline(tmp_path, topic, name="api_orders")

    [outcome] = ingest.run(spark, pipeline_file, once=True)

    assert (outcome.pipeline, outcome.error) == ("api_orders", None)
    assert outcome.batches >= 1
    report = ingest.status(spark, pipeline_file)
    assert report.ok and report.table_exists
    assert sum(p.lag for p in report.partitions) == 0
    assert report.to_dict()["pipeline"] == "api_orders"
    audit = ingest.verify(spark, pipeline_file)
    assert (audit.ok, audit.target_rows, audit.dead_letters, audit.duplicates) == (True, 10, 1, 0)
    assert not (tmp_path / "checkpoints" / "api_orders" / "_ingest_lease.json").exists()


def test_start_reports_batches_keeps_the_lease_and_stops(spark, kafka, topic, tmp_path, bootstrap):
    send_orders(kafka, topic, 10)
    pipeline_file = write_pipeline(tmp_path, topic, name="api_live", trigger={"processing_time": "1 second"})

    handle = ingest.start(spark, pipeline_file)
    try:
        wait_for(lambda: handle.last_report is not None, 240, "the first batch")
        assert handle.is_active
        assert handle.last_report.summary.read == 11
        with pytest.raises(ingest.IngestError, match="api_live"):  # the lease keeps a second copy out
            ingest.start(spark, pipeline_file)
    finally:
        handle.stop(timeout=120)
    [outcome] = handle.await_termination(timeout=1)
    assert outcome.error is None and not handle.is_active
    assert not (tmp_path / "checkpoints" / "api_live" / "_ingest_lease.json").exists()


def test_a_failed_run_raises_run_failed_with_batch_and_offsets(spark, kafka, topic, tmp_path, bootstrap):
    send_orders(kafka, topic, 10)
    pipeline_file = write_pipeline(tmp_path, topic, name="api_broken")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "api_broken").write_text("not a table")  # the target cannot be created

    with pytest.raises(ingest.RunFailed) as failed:
        ingest.run(spark, pipeline_file, once=True)

    error = failed.value
    assert (error.pipeline, error.batch_id) == ("api_broken", 0)
    assert error.offsets == {topic: {0: 6, 1: 5}}
    assert error.cause is not None
    assert str(error).startswith("pipeline api_broken failed in batch 0 (offsets ")


def test_bad_input_raises_spec_errors_with_every_problem(spark, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: Broken\nuid: {header: id, field: id}\n")
    with pytest.raises(ingest.SpecErrors) as raised:
        ingest.run(spark, broken, once=True)
    assert {p.code for p in raised.value.problems} >= {"bad_name", "uid_rules", "missing_key"}


def test_import_is_cheap():
    probe = ("import sys, ingest; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'delta', 'yaml')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_without_preflight_a_lost_checkpoint_resumes_from_the_delta_log(spark, kafka, topic, tmp_path,
                                                                         bootstrap):
    send_orders(kafka, topic, 10)
    pipeline_file = write_pipeline(tmp_path, topic, name="api_no_preflight")
    with pytest.warns(UserWarning, match="preflight=False"):
        ingest.run(spark, pipeline_file, once=True, preflight=False)
    shutil.rmtree(tmp_path / "checkpoints" / "api_no_preflight")
    send_orders(kafka, topic, 10)  # the same 10 uids again, and another malformed record

    handle = ingest.start(spark, pipeline_file, once=True, preflight=False)
    handle.await_termination(timeout=300)

    assert any("resuming from the offsets recorded in the Delta log" in note for note in handle.notes)
    audit = ingest.verify(spark, pipeline_file)
    assert (audit.ok, audit.target_rows, audit.dead_letters) == (True, 10, 2)
