"""Delta on S3 and concurrent writers.

OSS Delta's default S3 log store (`S3SingleDriverLogStore`) checks that a log version is free,
then PUTs it: S3 as that store uses it has no put-if-absent. Inside one JVM a lock per path
makes the check and the PUT one step, so a run's own compaction (`maintenance.optimize_every`,
on the run's driver) is safe; between drivers nothing does, and two committing the same version
both "succeed": the later PUT replaces the earlier commit, whose rows are lost
(tests/integration/test_s3.py shows it on the S3 stand-in). A second driver is a second copy of
the pipeline or `ingest maintain` beside the run. Several drivers are safe with a log store that
commits a version only if it is absent: ingest's `ingest.delta.S3ConditionalLogStore` on a store
with conditional writes (S3A's `If-None-Match: *`), which sessions ingest builds carry, or
Delta's `S3DynamoDBLogStore` with its DynamoDB table. Databricks commits S3 tables through its
own service and needs none.
"""

from __future__ import annotations

from typing import Callable

from ingest.errors import Problem
from ingest.platform.own_jar import LOG_STORE_CLASS
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


Unsafe = tuple[str, str, str, str]  # (what, location, scheme, why)
Conditional = Callable[[str], "bool | None"]


def _unsafe_why(store: str | None, location: str, conditional: Conditional) -> str | None:
    """Why the log store in effect lets one writing driver only commit safely, or None."""
    if store and LOG_STORE_CLASS in store:
        offered = conditional(location)
        if offered:
            return None
        return ("with ingest's log store on a store that offers no conditional create "
                "(fs.s3a.create.conditional.enabled is false, or the store has no If-None-Match)"
                if offered is False else "with ingest's log store, which this session cannot load")
    if not store or SINGLE_DRIVER in store:
        return "with Delta's single-driver log store"
    return None  # the DynamoDB store, or a multi-writer store of the user's own


def single_driver_tables(pipeline: Pipeline, setting: Callable[[str], str | None],
                         on_databricks: bool = False,
                         conditional: Conditional = lambda location: None) -> list[Unsafe]:
    """Each table the pipeline writes that is on S3 where its log store lets one writing driver
    only commit safely; `setting` reads a Spark setting (None when unset), `conditional` tells
    whether the store at a location creates a file only if absent (None: cannot tell)."""
    if on_databricks:
        return []
    unsafe = []
    for what, location in (("target", pipeline.target.path), ("dead letters", pipeline.dead_letter.path)):
        scheme = _scheme(location)
        if scheme is None:
            continue
        store = setting(log_store_setting(scheme)) or setting("spark.delta.logStore.class")
        why = _unsafe_why(store, location, conditional)
        if why:
            unsafe.append((what, location, scheme, why))
    return unsafe


def _places(unsafe: list[Unsafe]) -> str:
    return f"{', '.join(f'{what} {location}' for what, location, _, _ in unsafe)} on S3 {unsafe[0][3]}"


def _remedy(unsafe: list[Unsafe]) -> str:
    return (f"set {log_store_setting(unsafe[0][2])}={LOG_STORE_CLASS} (ingest's jar) on a store with "
            "conditional writes (docs/cluster.md#tables-on-s3)")


def single_driver_warning(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False,
                          conditional: Conditional = lambda location: None) -> str | None:
    """What `run` says at start when a table it writes is on S3 where one writing driver only is safe."""
    unsafe = single_driver_tables(pipeline, setting, on_databricks, conditional)
    if not unsafe:
        return None
    return (f"{pipeline.name}: {_places(unsafe)}: safe with this run as the only writing driver. A second "
            "copy of this pipeline, `ingest maintain` or any other driver writing at the same time can "
            f"lose a commit; {_remedy(unsafe)}")


def second_driver_problem(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False,
                          conditional: Conditional = lambda location: None) -> Problem | None:
    """`ingest maintain` is a driver of its own beside the run: refused where one writing driver
    only is safe, unless the caller says the pipeline is stopped."""
    unsafe = single_driver_tables(pipeline, setting, on_databricks, conditional)
    if not unsafe:
        return None
    return Problem("unsafe_writers", "target.path",
                   f"{_places(unsafe)}: `ingest maintain` is a second writing driver, and beside a running "
                   "pipeline one of the two can lose a commit; stop the pipeline and pass --pipeline-stopped, "
                   "compact inside the run with maintenance.optimize_every (its own driver), or "
                   f"{_remedy(unsafe)}",
                   file=pipeline.source_file)
