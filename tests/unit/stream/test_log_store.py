"""The warning `run` gives for Delta tables on S3 without a multi-cluster log store (no JVM)."""

from dataclasses import replace

import pytest

from ingest.spec.model import DeadLetter, Target
from ingest.stream.log_store import second_driver_problem, single_driver_warning
from tests.unit.spec.test_locations import pipeline as make_pipeline


def on(path, dead_letter="/local/dl"):
    return replace(make_pipeline("orders", path, "/cp"), dead_letter=DeadLetter(path=dead_letter))


@pytest.mark.parametrize("path", ["s3a://bucket/tables/orders", "s3://bucket/orders", "S3N://b/o"])
def test_s3_without_a_log_store_is_warned(path):
    warning = single_driver_warning(on(path), {}.get)
    assert warning and f"target {path}" in warning and "the only writing driver" in warning
    assert f"spark.delta.logStore.{path.split(':')[0].lower()}.impl" in warning
    assert "ingest.delta.S3ConditionalLogStore" in warning


def test_the_dead_letters_on_s3_are_warned_too():
    warning = single_driver_warning(on("/local/t", "s3a://b/dl"), {}.get)
    assert "dead letters s3a://b/dl" in warning and "target" not in warning.split(":")[1]


def test_a_multi_cluster_log_store_or_databricks_or_local_paths_are_not_warned():
    dynamo = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"}
    assert single_driver_warning(on("s3a://b/t", "s3a://b/dl"), dynamo.get) is None
    assert single_driver_warning(on("s3a://b/t"), {}.get, on_databricks=True) is None
    assert single_driver_warning(on("/data/t"), {}.get) is None
    assert single_driver_warning(on("abfss://c@a.dfs.core.windows.net/t"), {}.get) is None
    assert single_driver_warning(replace(on("/t"), target=Target(table="main.sales.orders")), {}.get) is None


def test_the_single_driver_store_named_explicitly_is_still_warned():
    single = {"spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore"}
    assert single_driver_warning(on("s3a://b/t"), single.get) is not None
    assert single_driver_warning(on("s3://b/t"), {"spark.delta.logStore.s3a.impl": "x.Dynamo"}.get) is not None


def test_maintain_beside_a_run_is_refused_on_the_single_driver_store_naming_the_setting():
    problem = second_driver_problem(on("s3a://b/t", "s3a://b/dl"), {}.get)
    assert problem is not None and problem.code == "unsafe_writers"
    assert "spark.delta.logStore.s3a.impl" in problem.message and "--pipeline-stopped" in problem.message
    safe = {"spark.delta.logStore.s3a.impl": "io.example.ConditionalPutLogStore"}
    assert second_driver_problem(on("s3a://b/t", "s3a://b/dl"), safe.get) is None
    assert second_driver_problem(on("/data/t"), {}.get) is None
    assert second_driver_problem(on("s3a://b/t"), {}.get, on_databricks=True) is None


INGEST_STORE = {"spark.delta.logStore.s3a.impl": "ingest.delta.S3ConditionalLogStore"}


def test_ingest_log_store_is_safe_only_where_the_store_creates_if_absent():
    assert single_driver_warning(on("s3a://b/t", "s3a://b/dl"), INGEST_STORE.get, conditional=lambda _: True) is None
    refused = single_driver_warning(on("s3a://b/t"), INGEST_STORE.get, conditional=lambda _: False)
    assert refused and "no conditional create" in refused and "fs.s3a.create.conditional.enabled" in refused
    unknown = single_driver_warning(on("s3a://b/t"), INGEST_STORE.get)  # a session that cannot tell
    assert unknown and "cannot load" in unknown
    assert second_driver_problem(on("s3a://b/t"), INGEST_STORE.get, conditional=lambda _: True) is None
