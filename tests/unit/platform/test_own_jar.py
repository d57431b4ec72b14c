"""ingest's own jar: the log store's Java compiled into the jar cache, and the session setting it."""

from __future__ import annotations

import shutil
import zipfile

import pytest

from ingest.platform import jars, own_jar
from ingest.platform.session import jar_conf

needs_jdk_and_jars = pytest.mark.skipif(
    shutil.which("javac") is None or jars.cached(jars.spark_artifacts()) is None,
    reason="javac and the resolved Spark jar set (make jars) build it")


@needs_jdk_and_jars
def test_the_jar_holds_the_log_store_and_the_conditional_files():
    jar = own_jar.build(jars.resolve_spark_jars(), jars.cache_root())
    assert jar == own_jar.cached_jar(jars.resolve_spark_jars(), jars.cache_root())
    names = set(zipfile.ZipFile(jar).namelist())
    assert {"ingest/delta/S3ConditionalLogStore.class", "ingest/delta/ConditionalFiles.class"} <= names


@needs_jdk_and_jars
def test_a_session_ingest_builds_carries_it_for_every_s3_scheme():
    conf = jar_conf("cache")
    assert str(own_jar.build(jars.resolve_spark_jars(), jars.cache_root())) in conf["spark.jars"].split(",")
    for scheme in ("s3", "s3a", "s3n"):
        assert conf[f"spark.delta.logStore.{scheme}.impl"] == "ingest.delta.S3ConditionalLogStore"


def test_without_javac_sessions_keep_delta_default_store(monkeypatch, tmp_path):
    monkeypatch.setenv("INGEST_JAR_CACHE", str(tmp_path))  # nothing built there
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(jars, "resolve_spark_jars", lambda: [])
    monkeypatch.setattr(own_jar, "_compile_classpath", lambda found: [tmp_path / "hadoop-client-api-3.5.0.jar"])
    assert own_jar.cached_jar([], tmp_path) is None
    with pytest.raises(own_jar.OwnJarError, match="javac is not on PATH"):
        own_jar.build([], tmp_path)
    assert not any(key.startswith("spark.delta.logStore") for key in jar_conf("cache"))
