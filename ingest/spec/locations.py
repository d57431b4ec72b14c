"""When two spellings name the same place: `a/cp` and `a/cp/`, `./a/cp` and the
absolute path, `s3a://b/x//y/` and `s3a://b/x/y`, `Main.Sales.Orders` and
`main.sales.orders`. Two pipelines of one application writing one target, or
sharing one checkpoint, would each take the other's commits for their own."""

from __future__ import annotations

import os
import re
from typing import Iterable

from ingest.errors import Problem
from ingest.spec.model import Pipeline

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?(.*)$")


def path_key(location: str) -> str:
    """A path in one canonical spelling (no file-system access, so nothing must exist)."""
    match = _SCHEME.match(location)
    if match and match.group(1).lower() != "file" and len(match.group(1)) > 1:  # not C:\...
        scheme, rest = match.group(1).lower(), match.group(3)
        return f"{scheme}://" + re.sub(r"/+", "/", rest).rstrip("/")
    if match and match.group(1).lower() == "file":
        location = "/" + match.group(3).lstrip("/")
    return os.path.normpath(os.path.abspath(location))


def shown_location(location: str) -> str:
    """A location as output shows it, to paste: a local path absolute (as the tables are
    made, `platform.delta.builder_location`), a URI or a catalog name as it is."""
    if "/" not in location or (_SCHEME.match(location) and len(location.split(":", 1)[0]) > 1):
        return location
    return os.path.normpath(os.path.abspath(location))


def table_key(name: str) -> str:
    parts = [part.strip("`").lower() for part in name.split(".")]
    if len(parts) == 3 and parts[0] == "spark_catalog":
        parts = parts[1:]
    return ".".join(parts)


def _target_key(pipeline: Pipeline) -> str:
    target = pipeline.target
    return f"table:{table_key(target.table)}" if target.table else f"path:{path_key(target.path)}"


def shared_locations(pipelines: Iterable[Pipeline]) -> list[Problem]:
    """A problem for each pipeline whose target or checkpoint another one already uses."""
    problems: list[Problem] = []
    seen: dict = {}
    for pipeline in pipelines:
        target_path = "target.table" if pipeline.target.table else "target.path"
        for path, key, shown in ((target_path, _target_key(pipeline), pipeline.target.location),
                                 ("checkpoint", path_key(pipeline.checkpoint), pipeline.checkpoint)):
            first = seen.setdefault((path.split(".")[0], key), pipeline)
            if first is not pipeline:
                what = "target" if path.startswith("target") else "checkpoint"
                problems.append(Problem(
                    "duplicate_name", path,
                    f"{shown!r} is the same {what} as pipeline {first.name!r} uses "
                    f"({first.target.location if what == 'target' else first.checkpoint!r}); "
                    f"expected a {what} of its own",
                    file=pipeline.source_file))
    return problems
