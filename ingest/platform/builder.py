"""What a session is built with: Delta, Spark's Kafka connector and where their jars come
from, and the local defaults. Both a classic session (`session`) and a Connect server started
here (`connect`) are configured from it, so neither imports the other for it.

`configure_builder` takes a builder and returns it configured, in the style of
delta-spark's `configure_spark_with_delta_pip`.

Jars (`INGEST_JARS`):
  cache (default)   resolve once with Maven into the cache folder, then `spark.jars`
  packages          Spark's own `spark.jars.packages` (Ivy) resolution
  none              add nothing: Databricks, or `spark-submit --jars/--packages`
  <a folder>        every jar in that folder (air-gapped clusters)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ingest.errors import IngestError
from ingest.platform import jars, own_jar

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# Where ingest builds the session (locally or under spark-submit, never on Databricks or a
# session that exists): PySpark's DataFrame debugging records the Python call site of every
# DataFrame function in the JVM (an active-session lookup, a conf read, a set and a clear: five
# calls through py4j beside the function's own), for error messages that would name ingest's
# own lines. A batch made three times the calls with it (docs/performance.md)
DRIVER_DEFAULTS = {"spark.python.sql.dataFrameDebugging.enabled": "false"}

LOG_CONFIG = Path(__file__).parents[1] / "resources" / "log4j2.properties"

JAVA_OPTIONS = "spark.driver.extraJavaOptions"

# A streaming run's driver made little garbage that lives, but G1 grew its committed heap toward
# -Xmx after young collections and, with no concurrent cycle in sight, never gave any back: the
# resident size rose for the whole run (docs/production.md, "make soak"). G1 returns heap only
# at the end of a concurrent cycle or a full collection, and its own periodic cycle
# (G1PeriodicGCInterval) waits for a pause-free interval a busy run never has. Spark's context
# cleaner calls System.gc() on a timer (`spark.cleaner.periodicGC.interval`); with these options
# that is a concurrent cycle, which ends with the heap cut to its used part plus 30%.
HEAP_FOLLOWS_LIVE_SET = ("-XX:+ExplicitGCInvokesConcurrent", "-XX:MinHeapFreeRatio=10", "-XX:MaxHeapFreeRatio=30")

# Local runs: one task per core is enough for a micro-batch (docs/performance.md).
_LOCAL_TASKS = str(max(2, min(os.cpu_count() or 2, 8)))

LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": _LOCAL_TASKS,
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
    # Delta rebuilds the table's file list (log replay) in 50 tasks by default, several
    # times per MERGE; on a local machine that is most of a small batch (bench/results/README.md)
    "spark.databricks.delta.snapshotPartitions": _LOCAL_TASKS,
    # VACUUM lists the table's files in stages of this many tasks (10,000 by default):
    # `ingest maintain` of a small table ran 70,000 tasks on 2 cores (docs/performance.md)
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": _LOCAL_TASKS,
    # Adaptive execution runs each shuffle's map side as a job of its own: a small batch
    # took 10 jobs with it, 5 without, and half the time (docs/performance.md)
    "spark.sql.adaptive.enabled": "false",
    # Spark keeps the Java it compiles for plans in a cache of 100 classes by default (4 segments
    # of 25). A batch of ingest uses about 80, so each batch compiled some 33 again, and the JIT
    # compiled those again too: a quarter of a 50,000-record batch's CPU (docs/performance.md)
    "spark.sql.codegen.cache.maxEntries": "500",
    # Every SQL execution renders its plan for the UI's SQL tab; the default "formatted"
    # rendering was a fifth of the driver's time in a small batch (docs/performance.md)
    "spark.sql.ui.explainMode": "simple",
    # Delta 4.4 re-verifies a small table's file list against its checksum after every
    # commit when the JVM's time zone is not UTC; the commit is as safe without it
    "spark.databricks.delta.allFilesInCrc.verificationMode.forceOnNonUTC.enabled": "false",
    # Spark's default log config prints INFO on stdout until setLogLevel runs; ours keeps
    # stdout for what `ingest` reports
    JAVA_OPTIONS: f"-Dlog4j2.configurationFile={LOG_CONFIG} {' '.join(HEAP_FOLLOWS_LIVE_SET)}",
    # System.gc() every few minutes, concurrent through the option above (30 minutes by default)
    "spark.cleaner.periodicGC.interval": "2min",
    # A table per topic: each table's jobs go to a pool of their own (`batch.routing`), and FAIR
    # shares the cores between them, so one big table's stages do not queue the small ones'.
    # Jobs without a pool share the default one, in order of submission, as under FIFO.
    "spark.scheduler.mode": "FAIR",
}


class SessionError(IngestError):
    """The SparkSession could not be configured."""


def on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def under_spark_submit() -> bool:
    """spark-submit launches the Python driver with a gateway already up."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def jar_mode() -> str:
    default = "none" if on_databricks() or under_spark_submit() else "cache"
    return os.environ.get("INGEST_JARS", default)


def jar_conf(mode: str | None = None) -> dict[str, str]:
    """The Spark settings that bring Delta and the Kafka connector for a jar mode."""
    mode = mode or jar_mode()
    if mode == "none":
        return {}
    if mode == "packages":
        artifacts = jars.spark_artifacts()
        return {"spark.jars.packages": ",".join(a.coordinate for a in artifacts),
                "spark.jars.excludes": ",".join(sorted({e for a in artifacts for e in a.exclusions})),
                **_with_own_jar([])}
    if mode == "cache":
        return _with_own_jar(jars.resolve_spark_jars())
    folder = Path(mode)
    found = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not found:
        raise SessionError(
            f"INGEST_JARS={mode!r} is neither cache, packages, none nor a folder with jars"
        )
    if any(p.name.startswith("ingest-delta") for p in found):
        return {"spark.jars": ",".join(str(p) for p in found), **own_jar.log_store_conf()}
    return {"spark.jars": ",".join(str(p) for p in found)}


def _with_own_jar(found: list[Path]) -> dict[str, str]:
    """`spark.jars` with ingest's own jar and its log store for S3 where it builds (a JDK's javac);
    without it S3 tables keep Delta's default log store, and `ingest run` says what that allows."""
    try:
        found = [*found, own_jar.build(jars.resolve_spark_jars(), jars.cache_root())]
        extra = own_jar.log_store_conf()
    except (jars.JarResolutionError, own_jar.OwnJarError):
        extra = {}
    return {"spark.jars": ",".join(str(p) for p in found), **extra} if found else extra


def check_jar_mode() -> None:
    """Under spark-submit the driver's JVM is already running: jars set now would
    reach the executors but not the driver, which then fails on its first query."""
    mode = jar_mode()
    if under_spark_submit() and mode != "none":
        raise SessionError(
            f"INGEST_JARS={mode!r} cannot take effect under spark-submit (the driver is "
            "already running); give the jars to spark-submit instead: --jars <jar,jar,...> "
            "or --packages <coordinates> (docs/cluster.md)")


def merged(*layers: Mapping[str, str] | None) -> dict[str, str]:
    """The layers' settings, a later layer's value winning, except the driver's JVM options, which
    are joined in layer order: a user's options do not drop ingest's log config or heap options,
    and where both name the same option the user's, coming last, is the one the JVM takes."""
    settings: dict[str, str] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            if key == JAVA_OPTIONS and settings.get(key):
                value = f"{settings[key]} {value}".strip()
            settings[key] = value
    return settings


def configure_builder(builder, extra_conf: Mapping[str, str] | None = None, mode: str | None = None):
    """Return `builder` set up for Delta and Kafka; `extra_conf` wins over defaults."""
    return configured(builder, merged(DELTA_CONF, jar_conf(mode), extra_conf))


def configured(builder, settings: dict[str, str]):
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder
