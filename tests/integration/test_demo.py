"""`ingest demo` end to end (one run, shared with the notebook tests): its counts are
checked in the tables it leaves, not only in what it prints."""

import json
import os
import re
import signal
import socket
import subprocess
import sys

import psutil
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from ingest.cli import main
from ingest.demo import MALFORMED, MARKER
from tests.integration.conftest import PROJECT
from tests.integration.processes import wait_for

ORDERS = 400  # the demo's default
MALFORMED_COUNT = sum(len(values) for values in MALFORMED.values()) + 3  # + 3 without a uid header
RETRIES = 27  # in the first half, orders n % 15 == 7 are re-sent at once, n % 15 == 3 much later
PRODUCED = ORDERS + RETRIES + MALFORMED_COUNT  # what a read_committed reader sees


def test_demo_finishes_and_says_exactly_once(demo_run):
    assert demo_run.exit_code == 0, demo_run.output[-3000:]
    out = demo_run.output
    assert "run 1 died as planned" in out
    assert "exactly once: every uid once, nothing missing" in out
    assert f"{demo_run.root}/tables/orders" in out
    assert demo_run.figure("records produced") == PRODUCED
    assert demo_run.figure("rows in the target") == ORDERS
    assert demo_run.figure("dead letters") == MALFORMED_COUNT
    assert [demo_run.figure(name) for name in ("duplicates", "missing", "unaccounted offsets")] == [0, 0, 0]


def test_target_holds_each_order_once_and_nothing_of_the_aborted_transaction(spark, demo_run):
    orders = spark.read.format("delta").load(str(demo_run.root / "tables" / "orders"))
    figures = orders.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct("_uid").alias("uids"),
                         F.countDistinct("order_id").alias("orders"),
                         F.max("order_id").alias("last")).first()
    assert (figures.rows, figures.uids, figures.orders) == (ORDERS, ORDERS, ORDERS)
    assert figures.last == f"o-{ORDERS - 1:05d}"  # the aborted transaction's orders come after


def test_every_malformed_record_is_one_dead_letter_with_its_bytes(spark, demo_run):
    dead = spark.read.format("delta").load(str(demo_run.root / "dead_letter" / "orders"))
    stages = {r.stage: r["count"] for r in dead.groupBy("stage").count().collect()}
    assert stages == {"decode": MALFORMED_COUNT - 3, "uid": 3}
    assert dead.select("_partition", "_offset").distinct().count() == MALFORMED_COUNT
    values = {bytes(r.value) for r in dead.select("value").collect()}
    assert set(MALFORMED["bad JSON"]) <= values


def test_the_crashed_batch_committed_once_and_the_batches_read_every_record(spark, demo_run):
    history = DeltaTable.forPath(spark, str(demo_run.root / "tables" / "orders")).history()
    entries = [json.loads(r.userMetadata) for r in history.where("operation = 'MERGE'").collect()]
    batch_ids = sorted(e["batch_id"] for e in entries)
    assert batch_ids == list(range(len(batch_ids))) and len(batch_ids) >= 3
    assert sum(e["counts"]["read"] for e in entries) == PRODUCED
    assert (demo_run.root / "logs" / "run-1.log").is_file()


def test_demo_never_empties_a_folder_it_did_not_make(tmp_path, capsys):
    (tmp_path / "tables" / "orders").mkdir(parents=True)
    (tmp_path / "tables" / "orders" / "precious.csv").write_text("a,b\n")
    assert main(["demo", "--data-root", str(tmp_path)]) == 1
    assert "tables/orders exists and was not made by the demo" in capsys.readouterr().err
    assert (tmp_path / "tables" / "orders" / "precious.csv").read_text() == "a,b\n"


def test_demo_keeps_the_rest_of_data_root(demo_run):
    """conf/local.yaml's DATA_ROOT holds your own pipelines' tables too: the demo leaves them."""
    assert (demo_run.root / "tables" / "yours" / "part-0").read_text() == "your table"
    assert "tables/orders" in (demo_run.root / MARKER).read_text()


def test_ctrl_c_stops_the_run_and_the_broker(tmp_path):
    """SIGINT to the demo's process group, as Ctrl-C in a terminal sends, mid-run."""
    demo = subprocess.Popen([sys.executable, "-m", "ingest", "demo", "--data-root", str(tmp_path)],
                            cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        lines = []
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("run 1:"):
                break
        port = int(re.search(r"broker up at 127\.0\.0\.1:(\d+)", "".join(lines)).group(1))
        processes = wait_for(lambda: _with_spark_child(demo.pid), 120, "the run's Spark JVM")
        os.killpg(demo.pid, signal.SIGINT)
        rest = demo.communicate(timeout=120)[0]
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    assert demo.returncode == 130, "".join(lines) + rest
    assert "the broker is stopped" in rest
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert alive == [], f"left running: {alive}"
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def _with_spark_child(pid):
    """The demo's processes once its `ingest run` child has started its JVM, else None."""
    try:
        processes = psutil.Process(pid).children(recursive=True)
        runs = [p for p in processes if p.cmdline()[2:4] == ["ingest", "run"]]
        return processes if runs and runs[0].children() else None
    except psutil.Error:  # a process ended while we looked
        return None

