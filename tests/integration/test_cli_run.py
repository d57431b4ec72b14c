"""`ingest run` as users run it: its report, its exit codes, its stop."""

from __future__ import annotations

import json
import signal

from confluent_kafka import Producer
from deltalake import DeltaTable as RustTable

from tests.integration.conftest import ingest_run
from tests.integration.processes import IngestProcess, wait_for, write_pipeline


def send_orders(kafka, topic, count: int) -> None:
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "linger.ms": 20})
    for i in range(count):
        body = json.dumps({"order_id": f"o{i}", "amount": 1.0, "ts": "2026-11-01T10:00:00"}).encode()
        producer.produce(topic, body, partition=i % 2, headers=[("message-id", f"u{i:06d}")])
    producer.produce(topic, b"{oops", partition=0, headers=[("message-id", "bad")])
    assert producer.flush(60) == 0


# The report and the exit codes are the command's (ingest.cli.main), the same in this process
# on the shared session as in a process of its own. A process of its own only where that is what
# is tested: the stops by signal, and a fresh process whose broker check stops it before any query
# starts while its JVM starts beside the check (the unreachable broker).


def test_batch_lines_and_progress_when_far_behind(spark, kafka, topic, tmp_path, capsys, monkeypatch):
    send_orders(kafka, topic, 12_000)
    pipeline_file = write_pipeline(tmp_path, topic, source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                  "max_offsets_per_trigger": 5000},
        "format": "json", "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"})
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, output = ingest_run(pipeline_file, capsys)
    assert code == 0, output[-3000:]
    batch_lines = [line for line in output.splitlines() if line.startswith("crashy batch ")]
    assert len(batch_lines) == 3  # 12,001 offsets, at most 5,000 a batch
    assert sum(int(line.split("read ")[1].split(",")[0]) for line in batch_lines) == 12_001
    assert "dead letters 1 (decode 1" in output
    assert "progress: crashy [" in output and "100.0% 12,001/12,001 records" in output
    assert "crashy: done after 3 batch(es)" in output


def test_a_failing_query_exits_1_naming_pipeline_batch_and_offsets(spark, kafka, topic, tmp_path, capsys,
                                                                 monkeypatch):
    send_orders(kafka, topic, 10)
    pipeline_file = write_pipeline(tmp_path, topic)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "crashy").write_text("not a table")  # the target cannot be created
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, output = ingest_run(pipeline_file, capsys)
    assert code == 1, output[-3000:]
    error = [line for line in output.splitlines() if line.startswith("error: ")]
    assert error and error[0].startswith("error: pipeline crashy failed in batch 0 (offsets ")
    assert f"{topic}/0:6" in error[0] and f"{topic}/1:5" in error[0]


def stop_after_a_batch(run: IngestProcess, stop, code: int) -> str:
    try:
        wait_for(lambda: "crashy batch " in run.output(), 900, "a batch", lambda: run.output()[-2000:])
        stop(run)
        assert run.wait(timeout=300) == code, run.output()[-3000:]
    finally:
        run.kill()
    return run.output()


def test_a_signal_to_the_process_group_stops_a_continuous_run_cleanly(spark, kafka, topic, tmp_path, capsys,
                                                                     monkeypatch):
    # as `timeout`, container inits and a terminal's Ctrl-C stop a process: the signal reaches
    # every process of the group at once; systemd's default KillMode=control-group signals the
    # JVM too. Mid-batch here (20 small batches queued).
    send_orders(kafka, topic, 400)
    source = {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic], "max_offsets_per_trigger": 20}}
    pipeline_file = write_pipeline(tmp_path, topic, trigger={"processing_time": "1 second"}, source=source)
    stops = [("group-sigterm", lambda run: run.signal_group(signal.SIGTERM), 0),
             ("unit-sigterm", lambda run: run.signal_every_process(signal.SIGTERM), 0),
             ("group-sigint", lambda run: run.signal_group(signal.SIGINT), 130)]
    for name, stop, code in stops:
        output = stop_after_a_batch(IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / f"{name}.log",
                                                  once=False), stop, code)
        # nothing from Python: no traceback, no py4j error (the JVM's own log lines may name them)
        python_errors = [line for line in output.splitlines()
                         if line.startswith(("Traceback", "py4j.protocol", "ERROR:root"))]
        assert not python_errors, output[-3000:]
        assert "crashy: stopped after" in output
        assert not (tmp_path / "checkpoints" / "crashy" / "_ingest_lease.json").exists()

    source["kafka"]["max_offsets_per_trigger"] = 5000  # the rest in one batch
    # the rest: `ingest run` in this process, on the shared session (no boundary to prove there)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, said = ingest_run(write_pipeline(tmp_path, topic, source=source), capsys)
    assert code == 0, said[-3000:]
    uids = RustTable(str(tmp_path / "tables" / "crashy")).to_pyarrow_table(columns=["_uid"]).column("_uid")
    assert sorted(uids.to_pylist()) == [f"u{i:06d}" for i in range(400)]  # each once, none lost


def test_an_unreachable_broker_fails_fast(tmp_path):
    from ingest.kafka.local_broker import free_port

    pipeline_file = write_pipeline(tmp_path, "nowhere")
    run = IngestProcess(pipeline_file, f"127.0.0.1:{free_port()}", tmp_path / "run.log")
    assert run.wait(timeout=120) == 1
    assert "did not answer" in run.output()
    # The JVM starts beside the preflight (ingest.platform.session.SessionStart), so it may have
    # printed; what matters is that the broker check stops the run before a query starts:
    # no table, no Spark checkpoint, the lease released.
    checkpoint = tmp_path / "checkpoints" / "crashy"
    assert not (tmp_path / "tables").exists()
    assert not (checkpoint / "metadata").exists() and not (checkpoint / "_ingest_lease.json").exists()


def test_a_batch_over_the_dead_letter_share_fails_the_run_naming_the_reason(spark, kafka, topic, tmp_path, capsys,
                                                                           monkeypatch):
    # issue 54.3: a producer that never sets the uid header sent everything to the dead letters, exit 0
    producer = Producer({**kafka.client_config(), "enable.idempotence": True})
    for i in range(6):
        producer.produce(topic, json.dumps({"order_id": f"o{i}", "amount": 1.0}).encode(), partition=i % 2)
    assert producer.flush(60) == 0
    pipeline_file = write_pipeline(tmp_path, topic, dead_letter={"max_share": 0.5})
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    code, output = ingest_run(pipeline_file, capsys)
    assert code == 1, output[-3000:]
    dead = tmp_path / "dead_letter" / "crashy"
    assert f"dead letters 6 (decode 0, transform 0, uid 6) in {dead}, filtered 0" in output
    error = [line for line in output.splitlines() if line.startswith("error: ")]
    assert error and error[0].startswith(
        "error: pipeline crashy batch 0: 6 of 6 records (100%) are dead letters, more than dead_letter.max_share "
        "0.5; the most frequent reason (6 records): header 'message-id' missing or null (uid.header: the "
        "producer must set it on every record)"), error
    assert len(RustTable(str(dead)).to_pyarrow_table()) == 6  # committed: nothing lost
