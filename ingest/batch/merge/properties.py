"""The table properties a pipeline asks for (`target.properties`,
`dead_letter.properties`) against the tables that exist: what differs (`ingest
plan`), and what `ingest run` changes before its query starts.

A table that exists keeps what it has unless the pipeline names the key: ingest's
own properties (`merge.target.ingest_properties`) are set at creation only, and a
key dropped from the YAML is left as the table has it. A key whose change is safe
on a table with data (SAFE_TO_CHANGE) is set with ALTER TABLE ... SET
TBLPROPERTIES, one commit per table; any other key is refused by name, before
anything is changed: a protocol upgrade (`delta.feature.*`, the reader and writer
versions) or column mapping cannot be taken back and would lock out the table's
older readers, and a user should decide that outside a pipeline run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ingest.batch.commit.warm_state import TABLE_CHECKPOINT_INTERVAL
from ingest.errors import Problem, SpecErrors
from ingest.platform.delta import delta_table, table_exists
from ingest.spec.model import Pipeline, Target
from ingest.spec.properties import APPEND_ONLY, CHANGE_DATA_FEED, DELETION_VECTORS, TYPE_WIDENING
from ingest.spec.yaml_tree import read_yaml

SAFE_TO_CHANGE = (
    CHANGE_DATA_FEED,  # later commits carry change files; earlier ones had none
    DELETION_VECTORS,  # later DML writes vectors (or, turned off, rewrites files again)
    TYPE_WIDENING,
    APPEND_ONLY,  # refused by the contract where the MERGE updates
    "delta.checkpointInterval",
    "delta.logRetentionDuration",
    "delta.deletedFileRetentionDuration",
    "delta.setTransactionRetentionDuration",
    "delta.dataSkippingNumIndexedCols",
    "delta.dataSkippingStatsColumns",
    "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites",
)


def ingest_properties(target: Target) -> dict[str, str]:
    """What ingest sets on a table it creates (docs/configuration.md says why), where the
    session has no default of its own: `delta.checkpointInterval`, so the checkpoints are
    written beside the batches (`commit.warm_state`), and `delta.enableDeletionVectors`, on
    where the MERGE updates or deletes rows (mode upsert: upserts, cdc, history,
    tombstones), so a change to a few rows of a file writes a small vector instead of the
    whole file again; off for insert_only, which never changes a row."""
    return {"delta.checkpointInterval": str(TABLE_CHECKPOINT_INTERVAL),
            DELETION_VECTORS: "true" if target.mode == "upsert" else "false"}


# a cdc table's key columns where its columns come from the messages, as a JSON list
# (`batch/message_key.py`): a later run and `ingest plan` read the key the table was made with
KEY_PROPERTY = "ingest.cdc.key"


def key_property(pipeline: Pipeline) -> dict[str, str]:
    """What a cdc table whose columns come from the messages keeps of its key, at creation."""
    if not pipeline.columns_from_messages or pipeline.cdc is None or not pipeline.cdc.key:
        return {}
    return {KEY_PROPERTY: json.dumps(list(pipeline.cdc.key))}


def recorded_key(session, pipeline: Pipeline) -> tuple[str, ...]:
    """The key columns the table was made with (KEY_PROPERTY); () for a table not made yet,
    or made without it."""
    if not table_exists(session, pipeline.target):
        return ()
    try:
        names = json.loads(current(session, pipeline.target).get(KEY_PROPERTY) or "[]")
    except ValueError:
        return ()
    return tuple(name for name in names if isinstance(name, str)) if isinstance(names, list) else ()


def evolution_properties(pipeline: Pipeline) -> dict[str, str]:
    """`schema_evolution: widen` needs Delta's type widening on the target (the pipeline's
    own `delta.enableTypeWidening`, if it names one, wins)."""
    return {TYPE_WIDENING: "true"} if pipeline.schema_evolution == "widen" else {}


@dataclass(frozen=True)
class Difference:
    table: str  # "target" or "dead letters"
    location: str
    key: str
    current: str | None  # None: not set on the table
    wanted: str

    @property
    def safe(self) -> bool:
        return self.key in SAFE_TO_CHANGE

    def line(self) -> str:
        now = "not set" if self.current is None else repr(self.current)
        verb = "run sets it" if self.safe else "refused: not safe to change on a table with data"
        return f"{self.table} {self.location}: {self.key}: {now} -> {self.wanted!r} ({verb})"


def tables(pipeline: Pipeline) -> list[tuple[str, Target, dict[str, str]]]:
    """Each table a pipeline writes that it names properties for."""
    dead = pipeline.dead_letter
    found = [("target", pipeline.target, {**evolution_properties(pipeline), **pipeline.target.properties}),
             ("dead letters", Target(path=dead.path, table=dead.table), dict(dead.properties))]
    return [(name, table, wanted) for name, table, wanted in found if wanted]


def current(session, table: Target) -> dict[str, str]:
    """The table's properties now (DESCRIBE DETAIL)."""
    row = delta_table(session, table).detail().select("properties").first()
    return dict(row.properties or {}) if row else {}


def differences(session, pipeline: Pipeline) -> list[Difference]:
    """The keys whose value on an existing table is not the pipeline's; a table not
    made yet has none (it is created with them)."""
    found = []
    for name, table, wanted in tables(pipeline):
        if not table_exists(session, table):
            continue
        now = current(session, table)
        found += [Difference(name, table.location, key, now.get(key), value)
                  for key, value in sorted(wanted.items()) if now.get(key) != value]
    return found


def apply(session, pipeline: Pipeline) -> list[Difference]:
    """Set the differing keys that are safe to change, after checking that none is
    unsafe (SpecErrors, exit 2, each with file:line:key). Returns what was changed."""
    found = differences(session, pipeline)
    refused = [one for one in found if not one.safe]
    if refused:
        raise SpecErrors([_refusal(pipeline, one) for one in refused])
    for location in sorted({one.location for one in found}):
        changed = [one for one in found if one.location == location]
        table = Target(path=location) if _is_path(pipeline, location) else Target(table=location)
        assignments = ", ".join(f"{_quoted(one.key)} = {_quoted(one.wanted)}" for one in changed)
        session.sql(f"ALTER TABLE {_sql_name(table)} SET TBLPROPERTIES ({assignments})")
    return found


def _refusal(pipeline: Pipeline, one: Difference) -> Problem:
    path = f"{'target' if one.table == 'target' else 'dead_letter'}.properties.{one.key}"
    return Problem("bad_value", path, f"{one.table} {one.location} has {one.key} "
                   f"{'not set' if one.current is None else repr(one.current)}, the pipeline says "
                   f"{one.wanted!r}, and it is not safe to change on a table with data (a protocol or "
                   "column mapping change cannot be taken back); expected the table's value, or the "
                   f"change made by hand (ingest changes only {', '.join(SAFE_TO_CHANGE)})",
                   _line(pipeline.source_file, path), pipeline.source_file)


def _line(file: str | None, path: str) -> int | None:
    """The key's line in the pipeline file, for the message (None if it cannot be read)."""
    try:
        return read_yaml(Path(file).read_text(encoding="utf-8"), file).index.line(path) if file else None
    except OSError:
        return None


def _is_path(pipeline: Pipeline, location: str) -> bool:
    return location in (pipeline.target.path, pipeline.dead_letter.path)


def _sql_name(table: Target) -> str:
    return table.table or "delta.`" + (table.path or "").replace("`", "``") + "`"


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
