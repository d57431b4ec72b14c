"""YAML text -> `Pipeline`, finding every problem in one pass.

The steps: safe load with a line index (`yaml_tree`), `${VAR}` resolution
(`variables`; `settings` says where values come from), then a check of every key
against the contract (`contract`, `contract_source`, `columns`) that builds the
frozen `spec` values. Problems are collected, not
raised one by one, and raised together as `SpecErrors`, sorted by line. Pure
Python: the Spark checks of DDL and SQL are a second pass (`sql_check`),
placed on lines with `Loaded.place`.

Raw dicts never leave the loading modules: callers get a `Loaded` and its `Pipeline`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping

from ingest.errors import Problem, SpecErrors
from ingest.spec import settings as conf
from ingest.spec.contract import build
from ingest.spec.locations import path_key, table_key
from ingest.spec.model import Pipeline
from ingest.spec.values import Check
from ingest.spec.variables import Resolver
from ingest.spec.yaml_tree import LineIndex, read_yaml


@dataclass(frozen=True)
class Loaded:
    """A valid pipeline with the line index it came from (for the Spark pass)."""

    pipeline: Pipeline
    index: LineIndex
    warnings: tuple[Problem, ...] = ()

    def place(self, problems: Iterable[Problem]) -> list[Problem]:
        """Problems found later (Spark pass) with this file's lines; messages masked."""
        placed = [replace(p, file=p.file or self.index.file, line=p.line or self.index.line(p.path))
                  for p in problems]
        return _masked(placed, self.pipeline.secret_values)


def load_file(path: str | Path, env: str = conf.DEFAULT_ENV,
              environ: Mapping[str, str] | None = None,
              conf_dir: str | Path | None = None,
              settings: conf.Settings | None = None,
              read_secret: conf.SecretReader | None = None) -> Loaded:
    """`load_text` of a file; an unreadable file is a problem too."""
    text = conf.read_text_file(path, "file")
    return load_text(text, str(path), env, environ, conf_dir, settings, read_secret)


def load_text(text: str, file: str = "<text>", env: str = conf.DEFAULT_ENV,
              environ: Mapping[str, str] | None = None, conf_dir: str | Path | None = None,
              settings: conf.Settings | None = None,
              read_secret: conf.SecretReader | None = None) -> Loaded:
    """The pipeline in `text` with its line index and warnings; raises SpecErrors with
    every problem found."""
    settings = settings or conf.load_settings(env, conf_dir)
    environ = os.environ if environ is None else environ
    doc = read_yaml(text, file)
    if any(problem.code == "yaml_syntax" for problem in doc.problems):
        raise SpecErrors(doc.problems)  # nothing else can be known about the file
    resolved = Resolver(doc.index, settings, environ, read_secret).tree(doc.value)
    found_so_far = doc.problems + tuple(resolved.problems)
    check = Check(doc.index, resolved.from_vars, found_so_far)
    check.problems.extend(found_so_far)
    pipeline = build(check, resolved.value)
    secrets = frozenset(resolved.secrets) | registry_secrets(pipeline)
    if check.problems:
        raise SpecErrors(_masked(check.problems, secrets))
    pipeline = replace(pipeline, source_file=file, secret_values=secrets)
    return Loaded(pipeline, doc.index, tuple(_masked(check.warnings, secrets)))


def registry_secrets(pipeline: Pipeline | None) -> frozenset[str]:
    """The registry's credentials, also when written literally: never printed."""
    registry = pipeline.source.registry if pipeline and pipeline.source else None
    if registry is None:
        return frozenset()
    secrets = {registry.bearer, registry.basic}
    if registry.basic and ":" in registry.basic:
        secrets.add(registry.basic.split(":", 1)[1])
    password = re.match(r"[a-z]+://[^/@]*:([^/@]+)@", registry.url)
    if password:
        secrets.add(password.group(1))
    return frozenset(s for s in secrets if s)


def _masked(problems: Iterable[Problem], secrets: frozenset[str]) -> list[Problem]:
    return [replace(p, message=conf.mask(p.message, secrets)) for p in problems]


def check_unique(loaded: Iterable[Loaded]) -> list[Problem]:
    """Problems where pipelines validated together share a name, a checkpoint or a
    target (however spelled: `a/cp` and `a/cp/` are one checkpoint)."""
    problems: list[Problem] = []
    seen: dict = {}
    for one in loaded:
        pipeline = one.pipeline
        target = ("target.table", pipeline.target.table, "table:" + table_key(pipeline.target.table)) \
            if pipeline.target.table else ("target.path", pipeline.target.path, path_key(pipeline.target.path))
        for key, value, same in (("name", pipeline.name, pipeline.name),
                                 ("checkpoint", pipeline.checkpoint, path_key(pipeline.checkpoint)), target):
            first = seen.setdefault((key.split(".")[0], same), one)
            if first is not one:
                problems.append(Problem(
                    "duplicate_name", key, f"{value!r} is also the {key.split('.')[0]} of "
                    f"{first.index.file}; expected a {key.split('.')[0]} of its own",
                    one.index.line(key), one.index.file))
    return problems
