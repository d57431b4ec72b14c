"""ingest's own JVM classes (`jvm/`), compiled once into the jar cache.

Delta's log store for S3 with several writers (`ingest.delta.S3ConditionalLogStore`) and
the conditional files the lease on an object store is made of (`ingest.delta.ConditionalFiles`)
are Java: Delta loads a log store by class name. They compile against two jars every
session already has (Hadoop's client API, in pyspark's jars, and Delta's storage API, in the
Spark jar set), into a small jar keyed by the sources' hash and those jars' names, so a fresh
clone builds it with `make jars` and a changed source builds anew. The jar set and the cache
folder are given by the caller (`platform.jars` resolves them and imports this module).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from ingest.errors import IngestError

SOURCES = Path(__file__).parent / "jvm"
JAR_NAME = "ingest-delta.jar"
LOG_STORE_CLASS = "ingest.delta.S3ConditionalLogStore"
# Delta picks a log store per scheme; s3:// and s3n:// reach S3A where fs.s3.impl says so
S3_SCHEMES = ("s3", "s3a", "s3n")


class OwnJarError(IngestError):
    """ingest's own jar cannot be built here (no javac, or a jar it compiles against is missing)."""


def _compile_classpath(spark_jars: list[Path]) -> list[Path]:
    import pyspark

    hadoop = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    storage = [j for j in spark_jars if re.fullmatch(r"delta-storage-\d[\w.]*\.jar", j.name)]
    if not hadoop or not storage:
        raise OwnJarError("ingest's log store compiles against hadoop-client-api (pyspark's "
                                      "jars) and delta-storage (the Spark jar set); one is missing")
    return hadoop[:1] + storage[:1]


def _folder(classpath: list[Path], cache: Path) -> Path:
    digest = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update(",".join(j.name for j in classpath).encode())
    return cache / f"ingest-delta-{digest.hexdigest()[:12]}"


def cached_jar(spark_jars: list[Path], cache: Path) -> Path | None:
    """The built jar, or None when it is not built (no javac where this runs, say)."""
    try:
        jar = _folder(_compile_classpath(spark_jars), cache) / JAR_NAME
    except OwnJarError:
        return None
    return jar if jar.is_file() else None


def build(spark_jars: list[Path], cache: Path) -> Path:
    """Compile `jvm/` with javac against the Spark jar set's delta-storage and pyspark's Hadoop,
    and pack the classes into `cache`, once per sources and classpath."""
    classpath = _compile_classpath(spark_jars)
    folder = _folder(classpath, cache)
    jar = folder / JAR_NAME
    if jar.is_file():
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise OwnJarError("javac is not on PATH (a JDK, 17 or later, builds ingest's log store); "
                                      "without it S3 tables keep Delta's single-driver log store")
    with tempfile.TemporaryDirectory(prefix="ingest-javac-") as work:
        classes = Path(work) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-d", str(classes),
                   "-cp", ":".join(str(j) for j in classpath), *map(str, sorted(SOURCES.glob("*.java")))]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise OwnJarError(f"javac could not build ingest's log store:\n{done.stderr.strip()}")
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        with zipfile.ZipFile(staging / JAR_NAME, "w", zipfile.ZIP_DEFLATED) as archive:
            for class_file in sorted(classes.rglob("*.class")):
                archive.write(class_file, class_file.relative_to(classes).as_posix())
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return jar


def log_store_conf() -> dict[str, str]:
    """Delta's log store setting per S3 scheme: ingest's, for sessions that carry its jar."""
    return {f"spark.delta.logStore.{scheme}.impl": LOG_STORE_CLASS for scheme in S3_SCHEMES}
