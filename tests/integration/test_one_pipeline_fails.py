"""One failing pipeline in an `ingest run` of several (issue 20.8), on the real stack:
by default it stops alone and the others go on (records sent after the failure still
land); with `--fail-fast` the first failure stops them all. The failure is a real one
in a batch: the bad pipeline's target path holds a file, so its first MERGE cannot
create the table."""

from __future__ import annotations

import json
import re

from confluent_kafka import Producer

from tests.integration.conftest import queries_stopped_after
from tests.integration.processes import IngestProcess, wait_for, write_pipeline

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


def read_by(output: str, pipeline: str) -> int:
    return sum(int(n) for n in re.findall(rf"^{pipeline} batch \d+: read (\d+),", output, re.MULTILINE))


def test_a_failed_pipeline_stops_alone_and_the_other_goes_on(spark, kafka, topic, tmp_path):
    send_orders(kafka, topic, 0, 6)
    run = IngestProcess(two_pipelines(tmp_path, topic), kafka.bootstrap, tmp_path / "run.log", once=False)
    try:
        wait_for(lambda: "bad is stopped; the other pipelines go on" in run.output(), 600,
                 "the bad pipeline's failure", lambda: run.output()[-3000:])
        send_orders(kafka, topic, 6, 4)  # after the failure: the good pipeline still reads them
        wait_for(lambda: read_by(run.output(), "good") == 10, 300, "the good pipeline's 10 records",
                 lambda: run.output()[-3000:])
        run.terminate()
        assert run.wait(timeout=120) == 1  # a pipeline failed
    finally:
        run.kill()
    output = run.output()
    assert "error: pipeline bad failed in batch 0 (offsets " in output, output[-3000:]
    assert "good: stopped after" in output
    rows = spark.read.format("delta").load(str(tmp_path / "tables" / "good"))
    assert rows.count() == rows.select("_uid").distinct().count() == 10


def test_fail_fast_stops_every_pipeline(spark, kafka, topic, tmp_path, capsys, monkeypatch):
    # `ingest run --fail-fast` in this process, on the shared session: what is tested is the
    # supervisor's stop, not a process boundary (the test above stops a child with a signal)
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
