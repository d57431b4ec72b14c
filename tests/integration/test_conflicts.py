"""A run survives other writers on its tables: compaction from Spark and from
delta-rs, and VACUUM, while it merges batch after batch."""

from __future__ import annotations

import threading

from deltalake import DeltaTable as RustTable

from ingest.cli import main
from tests.integration.processes import IngestProcess, wait_for, write_pipeline
from tests.integration.test_faults import send


def compact_until(stopped: threading.Event, spark, path: str, log: list[str]) -> None:
    """The other writer: OPTIMIZE (Spark), compact (delta-rs), VACUUM, over and over."""
    from delta.tables import DeltaTable

    while not stopped.is_set():
        for name, step in (("spark optimize", lambda: DeltaTable.forPath(spark, path).optimize().executeCompaction()),
                           ("delta-rs compact", lambda: RustTable(path).optimize.compact()),
                           ("spark vacuum", lambda: DeltaTable.forPath(spark, path).vacuum())):
            try:
                step()
                log.append(name)
            except Exception as error:  # the other writer loses conflicts too; it only has to keep trying
                log.append(f"{name} failed: {type(error).__name__}")
            if stopped.is_set():
                return


def test_a_run_survives_compaction_and_vacuum_of_its_target(spark, kafka, topic, tmp_path, monkeypatch):
    # 7 batches of 40 records, each its own MERGE commit, with a compactor running throughout
    pipeline_file = write_pipeline(tmp_path, topic, source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic], "max_offsets_per_trigger": 40},
        "format": "json", "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"})
    send(kafka, topic, [f"a{i}" for i in range(140)], partition=0)
    send(kafka, topic, [f"b{i}" for i in range(120)] + [f"a{i}" for i in range(20)], partition=1)
    target = str(tmp_path / "tables" / "crashy")

    # the first batch creates the target; the compactor starts under the rest
    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "run.log")
    wait_for(lambda: (tmp_path / "tables" / "crashy" / "_delta_log").exists(), 480, "the target",
             lambda: run.output()[-2000:])
    stopped, compactions = threading.Event(), []
    compactor = threading.Thread(target=compact_until, args=(stopped, spark, target, compactions))
    compactor.start()
    try:
        code = run.wait(timeout=900)
    finally:
        stopped.set()
        compactor.join(120)
    output = run.output()
    assert code == 0, output[-3000:]
    assert "write conflict" in output, f"no conflict met; compactor did: {compactions}\n{output[-2000:]}"
    assert any(c == "delta-rs compact" for c in compactions) and any(c == "spark optimize" for c in compactions)

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    assert main(["verify", str(pipeline_file)]) == 0
