"""A Connect server that refuses caching, as Databricks serverless does: the batches go on
without it, exactly; `verify`, which needs one view of the topic across its passes, says so.

The server is started apart with a cache serializer that does not exist: every `persist`
fails on the server (ClassNotFoundException), while Delta's own work (its snapshots, the
MERGE's materialized source) does not go through that cache and runs as usual.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable as RustTable

from tests.connect.server import ConnectServer
from tests.connect.test_remote_server import batch_lines, client_apart, remote_run, remote_verify, txn_commits, uids
from tests.connect.test_run import orders, send
from tests.integration.processes import write_pipeline

__all__ = ["client_apart"]  # its autouse fixture: the runs here are clients of the server below

REFUSES_CACHING = {"spark.sql.cache.serializer": "ingest.NoCacheOnThisServer"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = ConnectServer(tmp_path_factory.mktemp("no-cache-server") / "server.log", conf=REFUSES_CACHING)
    started.start()
    yield started
    started.stop()


def test_batches_go_on_without_caching_and_verify_refuses(server, kafka, topic, tmp_path):
    """Two pipelines in one run on the server apart: one table (its processor caches the MERGE
    source), and a table per topic (its router caches the raw batch)."""
    from ingest.kafka.local_broker import create_topic

    second = f"{topic}-b"
    create_topic(kafka.client_config(), second, partitions=2)
    sent = orders(20)
    send(kafka, topic, sent + sent[:3] + [("bad", b"{oops", 1)])  # retries and a bad record, at the end
    send(kafka, second, orders(4))
    one_table = write_pipeline(tmp_path, topic, name="uncached",
                               source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "topics": [topic],
                                                 "max_offsets_per_trigger": 10}})
    per_topic = write_pipeline(tmp_path, topic, name="uncached_topics",
                               source={"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}",
                                                 "topics": [topic, second]}},
                               target={"path": str(tmp_path / "per_topic" / "${topic}")})

    run = remote_run([one_table, per_topic], kafka, server, tmp_path / "run.log")

    assert run.wait(timeout=900) == 0, run.output()[-3000:]
    assert "refuses caching" in server.output()  # the batches did run without it
    output = run.output()
    read = sum(int(line.split("read ")[1].split(",")[0]) for line in batch_lines(output, "uncached"))
    assert read == 24, output
    target = tmp_path / "tables" / "uncached"
    assert sorted(uids(target)) == sorted(uid for uid, _, _ in sent)  # each once: nothing lost or doubled
    versions = [version for _, _, version in txn_commits(target)]
    assert versions == list(range(len(versions))) and len(versions) >= 3
    dead = RustTable(str(tmp_path / "dead_letter" / "uncached")).to_pyarrow_table().to_pylist()
    assert [(d["stage"], d["value"]) for d in dead] == [("decode", b"{oops")]
    for name, count in ((topic, 20), (second, 4)):
        assert sorted(uids(tmp_path / "per_topic" / name)) == [f"u{i:04d}" for i in range(count)]

    audit = remote_verify(one_table, kafka, server)
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert "ingest verify needs caching" in audit.stderr and "Traceback" not in audit.stderr
