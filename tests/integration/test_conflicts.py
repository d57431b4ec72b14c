"""A run survives other writers on its target: compaction from Spark (ingest's own
`maintain` functions) and from delta-rs, and VACUUM, while it merges batch after batch."""

from __future__ import annotations

import threading

from deltalake import DeltaTable as RustTable

from ingest.cli import main
from ingest.spec.model import Target
from ingest.stream.maintenance import compact, vacuum_table
from tests.integration.processes import IngestProcess, wait_for, write_pipeline
from tests.integration.test_faults import send

WEEK_S = 7 * 24 * 3600


def attempt(log: list[str], name: str, step) -> None:
    try:
        step()
        log.append(name)
    except Exception as error:  # the other writer loses conflicts too; it only has to keep trying
        log.append(f"{name} failed: {type(error).__name__}")


def maintain_until(stopped: threading.Event, spark, target: Target, log: list[str]) -> None:
    """What a nightly job does: OPTIMIZE (Spark), compact (delta-rs), VACUUM, over and over."""
    while not stopped.is_set():
        attempt(log, "delta-rs compact", lambda: RustTable(target.path).optimize.compact())
        attempt(log, "spark vacuum", lambda: vacuum_table(spark, "target", target, WEEK_S))
        attempt(log, "spark optimize", lambda: compact(spark, "target", target))


def rewrite_until_conflicts(stopped: threading.Event, run: IngestProcess, path: str, log: list[str]) -> None:
    """Auto-compaction at its busiest: delta-rs rewrites every file every second, so a MERGE
    is sure to meet it, until the run has logged two conflicts."""
    while not stopped.is_set() and run.output().count("write conflict") < 2:
        attempt(log, "delta-rs z-order", lambda: RustTable(path).optimize.z_order(["_uid"]))
        stopped.wait(1)  # returns at once when the run ends


def test_a_run_survives_compaction_and_vacuum_of_its_target(spark, kafka, topic, tmp_path, monkeypatch):
    # 7 batches of 40 records, each its own MERGE commit, with other writers throughout
    pipeline_file = write_pipeline(tmp_path, topic, source={
        "kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic], "max_offsets_per_trigger": 40},
        "format": "json", "schema": "order_id STRING NOT NULL, amount DOUBLE, ts TIMESTAMP"})
    send(kafka, topic, [f"a{i}" for i in range(140)], partition=0)
    send(kafka, topic, [f"b{i}" for i in range(120)] + [f"a{i}" for i in range(20)], partition=1)
    target = Target(path=str(tmp_path / "tables" / "crashy"))

    # the run creates the target; the other writers start under its batches. At its first
    # commit, not its log folder: in a folder without one delta-rs finds no table, and the
    # compaction that failed there came round again only after the run had ended (run alone).
    run = IngestProcess(pipeline_file, kafka.bootstrap, tmp_path / "run.log")
    first_commit = tmp_path / "tables" / "crashy" / "_delta_log" / f"{0:020d}.json"
    wait_for(first_commit.exists, 480, "the target's first commit", lambda: run.output()[-2000:])
    stopped, done = threading.Event(), []
    writers = [threading.Thread(target=maintain_until, args=(stopped, spark, target, done)),
               threading.Thread(target=rewrite_until_conflicts, args=(stopped, run, target.path, done))]
    for writer in writers:
        writer.start()
    try:
        code = run.wait(timeout=900)
    finally:
        stopped.set()
        for writer in writers:
            writer.join(900)  # a Spark OPTIMIZE on a loaded machine takes minutes
    output = run.output()
    assert code == 0, output[-3000:]
    assert "write conflict" in output, f"no conflict met; the other writers did: {done}\n{output[-2000:]}"
    assert {"spark optimize", "delta-rs compact", "spark vacuum", "delta-rs z-order"} <= set(done), done

    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    assert main(["verify", str(pipeline_file)]) == 0
