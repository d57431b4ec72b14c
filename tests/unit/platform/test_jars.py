"""The Delta jar follows the installed delta-spark, not a constant."""

from importlib.metadata import version

import pytest

from ingest.platform import jars


def test_delta_jar_is_the_installed_delta_spark():
    delta, kafka = jars.spark_artifacts("4.2.0")
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
