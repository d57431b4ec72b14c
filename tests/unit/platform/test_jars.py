"""The Delta jar follows the installed delta-spark, not a constant."""

from importlib.metadata import version

import pytest

from ingest.platform import jars


def test_delta_jar_is_the_installed_delta_spark():
    delta, kafka, *_ = jars.spark_artifacts("4.2.0")
    assert delta.coordinate == f"io.delta:delta-spark_4.2_2.13:{version('delta-spark')}"
    assert kafka.coordinate == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


def test_a_given_delta_version_wins():
    assert jars.spark_artifacts("4.1.0", "4.0.0")[0].coordinate == "io.delta:delta-spark_4.1_2.13:4.0.0"


def test_without_delta_spark_the_error_says_what_to_install(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(jars.JarResolutionError, match=r"ingest\[spark\]"):
        jars.delta_version()


def test_s3a_comes_with_the_hadoop_pyspark_ships_and_not_the_sdk_bundle():
    s3 = {a.name: a for a in jars.spark_artifacts("4.2.0")[2:]}
    assert s3["hadoop-aws"].version == "3.5.0"
    assert "software.amazon.awssdk:bundle" in s3["hadoop-aws"].exclusions
    assert {"s3", "s3-transfer-manager", "sts", "apache-client"} <= set(s3)


def test_exclusions_reach_the_pom_and_the_cache_key():
    plain = jars.Artifact("g", "a", "1")
    excluding = jars.Artifact("g", "a", "1", exclusions=("x:y",))
    assert "<exclusion><groupId>x</groupId><artifactId>y</artifactId></exclusion>" in jars._pom([excluding])
    assert "<exclusions>" not in jars._pom([plain])
    assert jars._set_folder([plain]) != jars._set_folder([excluding])
