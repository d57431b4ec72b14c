"""Delta on S3 and concurrent writers.

OSS Delta's default S3 log store checks that a commit file is absent and then
writes it: two drivers committing the same version of a table can both pass
the check, and one commit is silently replaced. It is safe with one writing
driver only (its lock orders the writers inside one JVM: the run's batches and
its own `maintenance.optimize_every`). Several drivers (a second copy, `ingest
maintain` or any job writing the table at the same time) need a log store that
makes the commit exclusive: ingest's `ingest.delta.S3ConditionalLogStore` on a
store with conditional writes (S3A's `If-None-Match: *`), which sessions
ingest builds carry, or Delta's `S3DynamoDBLogStore` with its DynamoDB table.
Databricks commits S3 tables through its own service and needs none.
"""

from __future__ import annotations

from typing import Callable

from ingest.platform.own_jar import LOG_STORE_CLASS
from ingest.spec.model import Pipeline

S3_SCHEMES = ("s3", "s3a", "s3n")
MULTI_CLUSTER_DYNAMODB = "S3DynamoDBLogStore"


def _scheme(location: str | None) -> str | None:
    if not location or "://" not in location:
        return None
    scheme = location.split("://", 1)[0].lower()
    return scheme if scheme in S3_SCHEMES else None


def _unsafe_why(store: str | None, location: str, conditional: Callable[[str], bool | None]) -> str | None:
    if store and MULTI_CLUSTER_DYNAMODB in store:
        return None
    if store and LOG_STORE_CLASS in store:
        offered = conditional(location)
        if offered:
            return None
        return ("its store offers no conditional create (fs.s3a.create.conditional.enabled is false, or the "
                "store has no If-None-Match)" if offered is False else "ingest's log store is not in this session")
    return f"with Delta's log store {store or 'S3SingleDriverLogStore (the default)'}"


def single_driver_warning(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False,
                          conditional: Callable[[str], bool | None] = lambda location: None) -> str | None:
    """A warning when a table the pipeline writes is on S3 where its log store lets one writing
    driver only commit safely; `setting` reads a Spark setting (None when unset), `conditional`
    tells whether the store at a location creates a file only if absent (None: cannot tell)."""
    if on_databricks:
        return None
    unsafe = []
    for what, location in (("target", pipeline.target.path), ("dead letters", pipeline.dead_letter.path)):
        scheme = _scheme(location)
        if scheme is None:
            continue
        store = setting(f"spark.delta.logStore.{scheme}.impl") or setting("spark.delta.logStore.class")
        why = _unsafe_why(store, location, conditional)
        if why:
            unsafe.append((what, location, scheme, why))
    if not unsafe:
        return None
    places = ", ".join(f"{what} {location}" for what, location, _, _ in unsafe)
    scheme, why = unsafe[0][2], unsafe[0][3]
    return (f"{pipeline.name}: {places} on S3 {why}: Delta is then safe with one writing driver only (a "
            f"second copy of this pipeline, `ingest maintain`, or any other writer at the same time can lose "
            f"a commit); set spark.delta.logStore.{scheme}.impl={LOG_STORE_CLASS} (ingest's jar) on a store "
            "with conditional writes (docs/cluster.md)")
