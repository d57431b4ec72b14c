"""Delta on S3 and concurrent writers.

S3 has no atomic put-if-absent in the API OSS Delta's default S3 log store
uses, so two drivers committing the same version of a table can both
"succeed" and one commit is lost. OSS Delta is safe on S3 with one writing
driver only, unless a multi-cluster log store is configured:
`spark.delta.logStore.s3a.impl=io.delta.storage.S3DynamoDBLogStore` (per
scheme: s3, s3a, s3n) and its DynamoDB table. Databricks commits S3 tables
through its own service and needs none.
"""

from __future__ import annotations

from typing import Callable

from ingest.spec.model import Pipeline

S3_SCHEMES = ("s3", "s3a", "s3n")
SINGLE_DRIVER = "S3SingleDriverLogStore"


def _scheme(location: str | None) -> str | None:
    if not location or "://" not in location:
        return None
    scheme = location.split("://", 1)[0].lower()
    return scheme if scheme in S3_SCHEMES else None


def single_driver_warning(pipeline: Pipeline, setting: Callable[[str], str | None],
                          on_databricks: bool = False) -> str | None:
    """A warning when a table the pipeline writes is on S3 with OSS Delta's single-driver
    log store; `setting` reads a Spark setting (None when unset)."""
    if on_databricks:
        return None
    unsafe = []
    for what, location in (("target", pipeline.target.path), ("dead letters", pipeline.dead_letter.path)):
        scheme = _scheme(location)
        if scheme is None:
            continue
        store = setting(f"spark.delta.logStore.{scheme}.impl") or setting("spark.delta.logStore.class")
        if not store or SINGLE_DRIVER in store:
            unsafe.append((what, location, scheme))
    if not unsafe:
        return None
    places = ", ".join(f"{what} {location}" for what, location, _ in unsafe)
    scheme = unsafe[0][2]
    return (f"{pipeline.name}: {places} on S3 without a multi-cluster log store: Delta is then safe with "
            f"one writing driver only (a second copy of this pipeline, `ingest maintain`, or any other "
            f"writer at the same time can lose a commit); set spark.delta.logStore.{scheme}.impl="
            "io.delta.storage.S3DynamoDBLogStore and its DynamoDB table (docs/cluster.md)")
