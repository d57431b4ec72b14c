"""JVM jars from Maven Central, resolved once into a cache folder.

Spark's own `--packages` goes through Ivy on every cold start and ignores
Maven's settings; resolving with `mvn dependency:copy-dependencies` into a
folder once lets every later start use `spark.jars` with no download.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ingest.errors import IngestError

KAFKA_BROKER_VERSION = "4.3.1"
# S3 through `s3a://`: hadoop-aws at the Hadoop pyspark ships (its hadoop-client-api jar), on the
# AWS SDK v2 modules it calls. hadoop-aws declares the SDK's `bundle` (every service, 600+ MB
# shaded); S3A needs s3 (the clients), s3-transfer-manager (uploads, copies), sts (the session
# credentials its default provider chain reads) and apache-client (the HTTP client it builds).
HADOOP_AWS_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.57.8"
AWS_SDK_MODULES = ("s3", "s3-transfer-manager", "sts", "apache-client")
SLF4J_VERSION = "1.7.36"  # the slf4j API line the Kafka 4.3 broker is built against

_COMPLETE_MARKER = ".complete"
_VERSION_SUFFIX = re.compile(r"-\d[\w.]*(-\d+)?\.jar$")


class JarResolutionError(IngestError):
    """Maven could not resolve a jar set."""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str
    exclusions: tuple[str, ...] = ()  # "group:name" of dependencies not to bring

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"


def spark_version() -> str:
    import pyspark

    return pyspark.__version__


def delta_version() -> str:
    """The installed delta-spark's version: its Python half and the jar must match."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-spark")
    except PackageNotFoundError:
        raise JarResolutionError("delta-spark is not installed; expected `pip install "
                                 "'ingest[spark]'` (it pins the pyspark and delta-spark pair)") from None


def spark_artifacts(spark: str | None = None, delta: str | None = None) -> list[Artifact]:
    """Delta and Spark's Kafka connector for the installed Spark and delta-spark."""
    spark = spark or spark_version()
    spark_minor = ".".join(spark.split(".")[:2])
    return [
        Artifact("io.delta", f"delta-spark_{spark_minor}_2.13", delta or delta_version()),
        Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", spark),
        *s3_artifacts(),
    ]


def s3_artifacts() -> list[Artifact]:
    """hadoop-aws and the SDK modules S3A uses; `delta-storage-s3-dynamodb` (Delta's multi-writer
    S3 log store) is not on Maven Central as reached here (4.4.0: "Missing POM"), and sits on the
    SDK v1 anyway: docs/cluster.md says what makes two writers safe on S3."""
    sdk = "software.amazon.awssdk"
    return [
        Artifact("org.apache.hadoop", "hadoop-aws", HADOOP_AWS_VERSION, exclusions=(f"{sdk}:bundle",)),
        # apache5-client: a second HTTP client S3A does not build; commons-logging: pyspark's
        # jcl-over-slf4j has its classes
        *(Artifact(sdk, module, AWS_SDK_VERSION,
                   exclusions=(f"{sdk}:apache5-client", "commons-logging:commons-logging"))
          for module in AWS_SDK_MODULES),
    ]


def broker_artifacts() -> list[Artifact]:
    return [
        Artifact("org.apache.kafka", "kafka_2.13", KAFKA_BROKER_VERSION),
        Artifact("org.slf4j", "slf4j-simple", SLF4J_VERSION),
    ]


def cache_root() -> Path:
    return Path(os.environ.get("INGEST_JAR_CACHE", Path.home() / ".cache" / "ingest" / "jars"))


def _set_folder(artifacts: list[Artifact]) -> Path:
    key = ",".join(sorted(a.coordinate + "".join(f"!{e}" for e in a.exclusions) for a in artifacts))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_root() / f"{artifacts[0].name}-{artifacts[0].version}-{digest}"


def cached(artifacts: list[Artifact]) -> list[Path] | None:
    """The resolved jars of this set, or None when not resolved yet."""
    folder = _set_folder(artifacts)
    if not (folder / _COMPLETE_MARKER).exists():
        return None
    return sorted(folder.glob("*.jar"))


def resolve(artifacts: list[Artifact], skip_names: frozenset[str] | set[str] = frozenset()) -> list[Path]:
    """Resolve artifacts and their runtime dependencies into the cache, once.

    `skip_names` are artifact names already on the classpath (pyspark's own
    jars): their copies are kept and Maven's are dropped, so one version of
    each library is loaded.
    """
    found = cached(artifacts)
    if found is not None:
        return found
    folder = _set_folder(artifacts)
    with tempfile.TemporaryDirectory(prefix="ingest-mvn-") as work:
        out = Path(work) / "jars"
        _copy_dependencies(artifacts, Path(work), out)
        for jar in out.glob("*.jar"):
            if artifact_name(jar.name) in skip_names:
                jar.unlink()
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(out, staging)
        (staging / _COMPLETE_MARKER).write_text("\n".join(a.coordinate for a in artifacts) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return sorted(folder.glob("*.jar"))


def artifact_name(jar_file_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`."""
    return _VERSION_SUFFIX.sub("", jar_file_name)


def pyspark_jar_names() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {artifact_name(j.name) for j in jars.glob("*.jar")}


def resolve_spark_jars() -> list[Path]:
    return resolve(spark_artifacts(), skip_names=pyspark_jar_names())


def resolve_broker_jars() -> list[Path]:
    return resolve(broker_artifacts())


def _pom(artifacts: list[Artifact]) -> str:
    deps = "\n".join(
        f"<dependency><groupId>{a.group}</groupId><artifactId>{a.name}</artifactId>"
        f"<version>{a.version}</version>{_exclusions(a)}</dependency>"
        for a in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>ingest</groupId><artifactId>jar-set</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )


def _exclusions(artifact: Artifact) -> str:
    if not artifact.exclusions:
        return ""
    parts = (name.split(":") for name in artifact.exclusions)
    return "<exclusions>" + "".join(f"<exclusion><groupId>{group}</groupId><artifactId>{name}</artifactId>"
                                    "</exclusion>" for group, name in parts) + "</exclusions>"


def _copy_dependencies(artifacts: list[Artifact], work: Path, out: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven (mvn) is not on PATH; install it, or point INGEST_JARS at a folder of jars"
        )
    (work / "pom.xml").write_text(_pom(artifacts))
    command = [mvn, "-q", "-B", "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={out}"]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        wanted = ", ".join(a.coordinate for a in artifacts)
        raise JarResolutionError(f"mvn could not resolve {wanted}:\n{tail}")


def main() -> None:
    """`python -m ingest.platform.jars`: resolve every jar set once (used by `make`)."""
    from ingest.platform import own_jar

    for label, resolver in (("spark", resolve_spark_jars), ("kafka broker", resolve_broker_jars)):
        found = resolver()
        print(f"{label} jars: {len(found)} in {found[0].parent}")
    print(f"ingest's log store: {own_jar.build(resolve_spark_jars(), cache_root())}")


if __name__ == "__main__":
    main()
