"""The demo's data through `ingest run --remote ... --once` (issue #32's first test): the
orders `ingest demo` produces (producer retries, late retries in a later batch, an aborted
transaction, committed transactions from a JSON Lines file, malformed records) and its
pipeline file, on the Connect server of this process. Fewer orders than the demo's 400,
in two batches."""

from __future__ import annotations

import uuid

from ingest import demo
from ingest.cli import main

ORDERS = 40
MAX_OFFSETS = 50  # two batches: the late retries meet the target rows of the first one


def test_the_demos_data_is_exact_on_connect(kafka, connect_spark, tmp_path, monkeypatch, capsys):
    # the demo's pipeline file, reading a topic of this test's own instead of `orders`
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    text = demo.PACKAGED_PIPELINE.read_text()
    assert "topics: [orders]" in text
    pipeline_file = tmp_path / "orders.yaml"
    pipeline_file.write_text(text.replace("topics: [orders]", f"topics: [{topic}]"))
    environ = demo.demo_environ(tmp_path, kafka.bootstrap, demo.DemoOptions(max_offsets_per_trigger=MAX_OFFSETS))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    sample = demo.produce_sample(kafka, topic, tmp_path / "sample", ORDERS, say=lambda text: None)

    code = main(["run", str(pipeline_file), "--remote", "sc://localhost", "--once"])

    out = capsys.readouterr()
    assert code == 0, out.err
    assert len([line for line in out.out.splitlines() if line.startswith("orders batch ")]) >= 2, out.out
    pipeline = demo.load_demo_pipeline(pipeline_file, environ)
    counts = demo.table_counts(connect_spark, pipeline)
    assert counts.target_rows == counts.unique_uids == sample.orders
    assert counts.dead_letters == sample.expected_dead_letters
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost")
    assert main(["verify", str(pipeline_file)]) == 0
    assert "verify orders: OK" in capsys.readouterr().out
