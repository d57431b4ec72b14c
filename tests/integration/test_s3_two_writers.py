"""Two writers of one pipeline's tables on S3 (moto's server, a stand-in, through S3A): a
second copy is refused by the lease on the checkpoint, and `ingest maintain` from another
process beside a continuous run loses no commit: `verify` finds every record once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

import ingest
from ingest.spec.document import to_document, to_yaml
from ingest.spec.model import DeadLetter, Target, Trigger
from ingest.stream.lease import AlreadyRunning
from ingest.stream.supervisor import Supervisor
from tests.integration.processes import ROOT, wait_for
from tests.integration.test_faults import send


@pytest.fixture
def on_s3(s3_root, pipeline):
    root = s3_root
    kafka = replace(pipeline.source.kafka, max_offsets_per_trigger=15)
    return replace(pipeline, source=replace(pipeline.source, kafka=kafka),
                   trigger=Trigger(available_now=False, processing_time="1 second"),
                   target=Target(path=f"{root}/tables/orders"), checkpoint=f"{root}/checkpoints/orders",
                   dead_letter=DeadLetter(path=f"{root}/dead_letter/orders"))


class Continuous:
    """A continuous run of a pipeline in this process, as `ingest run` would run it."""

    def __init__(self, spark, pipeline):
        self.batches, self.notes = [], []
        self.supervisor = Supervisor([pipeline], once=False, on_report=lambda r, _: self.batches.append(r),
                                     on_note=self.notes.append)
        self.supervisor.claim()
        self.supervisor.start(spark)
        self.outcomes: list = []
        self.thread = threading.Thread(target=lambda: self.outcomes.extend(self.supervisor.wait()), daemon=True)
        self.thread.start()

    def stop(self):
        self.supervisor.request_stop()
        self.thread.join(timeout=120)
        self.supervisor.release()


def test_a_second_copy_on_s3_is_refused_by_the_lease(spark, kafka, topic, on_s3, tmp_path):
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(on_s3)))
    send(kafka, topic, [f"a{i}" for i in range(10)])
    first = Continuous(spark, on_s3)
    try:
        wait_for(lambda: first.batches, 240, "the first copy's first batch")
        second = Supervisor([on_s3], once=True, on_report=lambda r, _: None, on_note=lambda n: None)
        second.claim()
        with pytest.raises(AlreadyRunning, match=f"orders is already running .*pid {os.getpid()}"):
            second.start(spark)
        second.release()
        assert not [n for n in first.notes if "no lease" in n or "one writing driver" in n], first.notes
    finally:
        first.stop()
    assert [o.error for o in first.outcomes] == [None]
    report = ingest.verify(spark, file)  # no record lost or doubled by the copy that was refused
    assert report.ok, report.to_dict()


def test_maintain_in_another_process_beside_a_continuous_run_loses_no_commit(
        spark, kafka, topic, on_s3, tmp_path, s3, s3_bucket):
    file = tmp_path / "orders.yaml"
    file.write_text(to_yaml(to_document(on_s3)))
    send(kafka, topic, [f"a{i}" for i in range(30)])
    run = Continuous(spark, on_s3)
    try:
        wait_for(lambda: len(run.batches) >= 2, 240, "two batches")
        env = {**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap,
               "SPARK_CONF_DIR": str(s3.spark_defaults(tmp_path / "spark-conf", s3_bucket))}
        maintain = subprocess.Popen([sys.executable, "-m", "ingest", "maintain", str(file), "--optimize"],
                                    cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for wave in range(4):  # batches keep committing while the other process compacts
            send(kafka, topic, [f"b{wave}-{i}" for i in range(15)], partition=wave % 2)
            time.sleep(2)
        output, _ = maintain.communicate(timeout=300)
        assert maintain.returncode == 0, output
        wait_for(lambda: sum(r.summary.read for r in run.batches) >= 90, 240, "every record read",
                 lambda: f"{[r.summary.read for r in run.batches]} {run.notes} {run.outcomes} {output[-3000:]}")
    finally:
        run.stop()
    assert [o.error for o in run.outcomes] == [None]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{on_s3.target.path}`").collect()
    assert "OPTIMIZE" in {h.operation for h in history}
    raced = [h.version for h in history if h.readVersion is not None and h.readVersion < h.version - 1]
    print(f"{len(history)} commits, {len(raced)} after losing a version to the other process: {raced}")
    report = ingest.verify(spark, file)
    assert report.ok, report.to_dict()
    assert spark.read.format("delta").load(on_s3.target.path).count() == 90
