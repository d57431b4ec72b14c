"""One failing pipeline in an `ingest run` of several (issue 20.8), on the real stack:
by default it stops alone and the others go on (records sent after the failure still
land); with `--fail-fast` the first failure stops them all. The failure is a real one
in a batch: the bad pipeline's target path holds a file, so its first MERGE cannot
create the table."""

from __future__ import annotations

import json
import os
import re
import signal
import threading

from confluent_kafka import Producer
from deltalake import DeltaTable as RustTable

from tests.integration.conftest import queries_stopped_after
from tests.integration.processes import wait_for, write_pipeline

CONTINUOUS = {"processing_time": "1 second"}


def send_orders(kafka, topic, first: int, count: int) -> None:
    producer = Producer({**kafka.client_config(), "enable.idempotence": True})
    for i in range(first, first + count):
        body = json.dumps({"order_id": f"o{i}", "amount": 1.0, "ts": "2026-11-01T10:00:00"}).encode()
        producer.produce(topic, body, partition=i % 2, headers=[("message-id", f"u{i:04d}")])
    assert producer.flush(60) == 0


def two_pipelines(tmp_path, topic) -> list:
    good = write_pipeline(tmp_path, topic, name="good", trigger=CONTINUOUS)
    bad = write_pipeline(tmp_path, topic, name="bad", trigger=CONTINUOUS)
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "bad").write_text("not a table")  # the target cannot be created
    return [good, bad]


def test_a_failed_pipeline_stops_alone_and_the_other_goes_on(spark, kafka, topic, tmp_path, capsys, monkeypatch):
    # `ingest run` in this process, on the shared session: what is tested is the supervisor's
    # choice, not a process boundary. A SIGTERM to this process, as `kill` sends a child's, ends
    # the continuous run through the command's own handler (test_cli_run.py signals children).
    from ingest.cli import main

    send_orders(kafka, topic, 0, 6)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    good = tmp_path / "tables" / "good"
    pytest_handler = signal.getsignal(signal.SIGTERM)
    problems: list[BaseException] = []

    def good_rows() -> int:  # the log's folder is made a moment before its first commit
        committed = any((good / "_delta_log").glob("*.json"))
        return RustTable(str(good)).to_pyarrow_table(columns=["_uid"]).num_rows if committed else 0

    def drive() -> None:
        try:
            # both queries start before either's first batch: the good one's first commit, with
            # its query the only one left, is the bad one's failure
            wait_for(lambda: good_rows() == 6 and [q.name for q in spark.streams.active] == ["good"], 600,
                     "the bad pipeline's failure")
            send_orders(kafka, topic, 6, 4)  # after the failure: the good pipeline still reads them
            wait_for(lambda: good_rows() == 10, 300, "the good pipeline's 10 records")
        except BaseException as error:  # reported in the test's thread, below
            problems.append(error)
        finally:
            wait_for(lambda: signal.getsignal(signal.SIGTERM) is not pytest_handler, 60, "the command's handler")
            os.kill(os.getpid(), signal.SIGTERM)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    with queries_stopped_after(spark, 900) as timed_out:  # should the SIGTERM not stop it
        code = main(["run", *map(str, two_pipelines(tmp_path, topic))])
    driver.join(timeout=60)
    said = capsys.readouterr()
    output = said.out + said.err
    assert not problems, f"{problems[0]}\n{output[-3000:]}"
    assert not timed_out, output[-3000:]
    assert code == 1, output[-3000:]  # a pipeline failed
    assert "error: pipeline bad failed in batch 0 (offsets " in output, output[-3000:]
    assert "bad is stopped; the other pipelines go on" in output, output[-3000:]
    assert "good: stopped after" in output
    rows = spark.read.format("delta").load(str(good))
    assert rows.count() == rows.select("_uid").distinct().count() == 10


def test_fail_fast_stops_every_pipeline(spark, kafka, topic, tmp_path, capsys, monkeypatch):
    # `ingest run --fail-fast` in this process, on the shared session, as the test above
    from ingest.cli import main

    send_orders(kafka, topic, 0, 6)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    # continuous queries: only the failure can end this run; should it not, the queries are
    # stopped after ten minutes, so the test fails rather than hangs
    with queries_stopped_after(spark, 600) as timed_out:
        code = main(["run", *map(str, two_pipelines(tmp_path, topic)), "--fail-fast"])
    said = capsys.readouterr()
    output = said.out + said.err
    assert not timed_out, f"--fail-fast did not stop the run:\n{output[-3000:]}"
    assert code == 1, output[-3000:]
    assert "error: pipeline bad failed in batch 0 (offsets " in output, output[-3000:]
    assert "the other pipelines go on" not in output
    assert re.search(r"^good: \w+ after \d+ batch\(es\)", output, re.MULTILINE), output[-3000:]
