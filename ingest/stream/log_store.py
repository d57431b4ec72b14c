"""Delta on S3 and concurrent writers.

OSS Delta's default S3 log store (`S3SingleDriverLogStore`) checks that a log version is free,
then PUTs it: S3 as that store uses it has no put-if-absent. Inside one JVM a lock per path
makes the check and the PUT one step, so a run's own compaction (`maintenance.optimize_every`,
on the run's driver) is safe; between drivers nothing does, and two committing the same version
both "succeed": the later PUT replaces the earlier commit, whose rows are lost
(tests/integration/test_s3.py shows it on the S3 stand-in). A second driver is a second copy of
the pipeline (no lease holds on S3 to keep it out) or `ingest maintain` beside the run.
Several writers are safe with a log store that commits a version only if it is absent, set
per scheme with `spark.delta.logStore.<scheme>.impl`; Databricks commits S3 tables through its
own service.
"""

from __future__ import annotations

from typing import Callable

from ingest.errors import Problem
from ingest.spec.model import Pipeline

S3_SCHEMES = ("s3", "s3a", "s3n")
SINGLE_DRIVER = "S3SingleDriverLogStore"


def log_store_setting(scheme: str) -> str:
    return f"spark.delta.logStore.{scheme}.impl"


def _scheme(location: str | None) -> str | None:
    if not location or "://" not in location:
        return None
    scheme = location.split("://", 1)[0].lower()
    return scheme if scheme in S3_SCHEMES else None


def single_driver_tables(pipeline: Pipeline, setting: Callable[[str], str | None],
                         on_databricks: bool = False) -> list[tuple[str, str, str]]:
    """(what, location, scheme) of each table the pipeline writes that is on S3 with OSS Delta's
    single-driver log store; `setting` reads a Spark setting (None when unset)."""
    if on_databricks:
        return []
    unsafe = []
    for what, location in (("target", pipeline.target.path), ("dead letters", pipeline.dead_letter.path)):
        scheme = _scheme(location)
        if scheme is None:
            continue
        store = setting(log_store_setting(scheme)) or setting("spark.delta.logStore.class")
        if not store or SINGLE_DRIVER in store:
            unsafe.append((what, location, scheme))
    return unsafe


def _places(unsafe: list[tuple[str, str, str]]) -> str:
    return ", ".join(f"{what} {location}" for what, location, _ in unsafe)


def _remedy(unsafe: list[tuple[str, str, str]]) -> str:
    return (f"set {log_store_setting(unsafe[0][2])} to a log store that commits a version only if it is "
            "absent (docs/cluster.md#tables-on-s3)")


def single_driver_warning(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False) -> str | None:
    """What `run` says at start when a table it writes is on S3 with the single-driver log store."""
    unsafe = single_driver_tables(pipeline, setting, on_databricks)
    if not unsafe:
        return None
    return (f"{pipeline.name}: {_places(unsafe)} on S3 with Delta's single-driver log store: safe with this "
            "run as the only writing driver. Nothing keeps a second copy of this pipeline out (no lease "
            "on S3), and a second copy, `ingest maintain` or any other driver writing at the same time "
            f"can lose a commit; {_remedy(unsafe)}")


def second_driver_problem(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False) -> Problem | None:
    """`ingest maintain` is a driver of its own beside the run: refused on the single-driver log
    store unless the caller says the pipeline is stopped."""
    unsafe = single_driver_tables(pipeline, setting, on_databricks)
    if not unsafe:
        return None
    return Problem("unsafe_writers", "target.path",
                   f"{_places(unsafe)} on S3 with Delta's single-driver log store: `ingest maintain` is a "
                   "second writing driver, and beside a running pipeline one of the two can lose a commit; "
                   "stop the pipeline and pass --pipeline-stopped, compact inside the run with "
                   f"maintenance.optimize_every (its own driver), or {_remedy(unsafe)}",
                   file=pipeline.source_file)
