"""One place, many spellings (no JVM)."""

from dataclasses import replace

import pytest

from ingest.spec.locations import path_key, shared_locations, table_key
from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Source, Target, Uid


@pytest.mark.parametrize("one, other", [
    ("/data/cp", "/data/cp/"),
    ("/data/cp", "/data//cp"),
    ("/data/cp", "file:///data/cp"),
    ("/data/cp", "/data/x/../cp"),
    ("s3a://bucket/cp", "s3a://bucket/cp/"),
    ("s3a://bucket/a/cp", "S3A://bucket/a//cp"),
])
def test_same_place(one, other):
    assert path_key(one) == path_key(other)


@pytest.mark.parametrize("one, other", [("/data/cp", "/data/cp2"), ("s3a://b/cp", "s3://b/cp"),
                                        ("s3a://b/cp", "s3a://b/CP")])
def test_other_places(one, other):
    assert path_key(one) != path_key(other)


def test_table_names_ignore_case_quotes_and_the_session_catalog():
    assert table_key("spark_catalog.Sales.`Orders`") == table_key("sales.orders")
    assert table_key("main.sales.orders") != table_key("sales.orders")


def pipeline(name, target, checkpoint):
    return Pipeline(name=name, source=Source(KafkaSource("b:9092", ("t",))), uid=Uid(field="id"),
                    target=Target(path=target), checkpoint=checkpoint, dead_letter=DeadLetter(path="/dl"),
                    source_file=f"{name}.yaml")


def test_two_pipelines_on_one_target_or_checkpoint():
    a = pipeline("a", "/t/a", "a/cp")
    assert shared_locations([a, pipeline("b", "/t/b", "b/cp")]) == []
    [same_checkpoint] = shared_locations([a, pipeline("b", "/t/b", "a/cp/")])
    assert (same_checkpoint.path, same_checkpoint.file) == ("checkpoint", "b.yaml")
    assert "same checkpoint as pipeline 'a' uses" in same_checkpoint.message
    [same_target] = shared_locations([a, pipeline("b", "/t/a/", "b/cp")])
    assert same_target.path == "target.path"
    tables = [replace(p, target=Target(table=t)) for p, t in ((a, "db.x"), (pipeline("b", "", "b"), "DB.X"))]
    assert [p.path for p in shared_locations(tables)] == ["target.table"]
