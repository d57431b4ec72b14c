"""A Delta table by catalog name or by path: decided here, once.

Targets, dead-letter tables and the delete log each carry `table` (a catalog
name) or `path`; every layer above opens, tests and creates them through these
functions, so a third way to locate a table has one place to go.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Protocol

from ingest.platform.connect import is_connect
from ingest.platform.files import local_path

_NAME_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|`[^`]+`")
_URI_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class Located(Protocol):
    """A table named in the catalog (`table`) or stored at `path`."""

    @property
    def table(self) -> str | None: ...

    @property
    def path(self) -> str | None: ...


def delta_table(session, where: Located):
    """The DeltaTable of a target, a dead-letter table or a table beside them."""
    return at_location(session, where.table or where.path or "", bool(where.table))


def at_location(session, location: str, is_table: bool):
    """The DeltaTable of a catalog name (`is_table`) or a path; on Spark Connect its SQL
    stand-in (`platform.delta_sql`)."""
    if is_connect(session):
        from ingest.platform.delta_sql import SqlDeltaTable, sql_name

        return SqlDeltaTable(session, sql_name(location, is_table))
    from delta.tables import DeltaTable

    return DeltaTable.forName(session, location) if is_table else DeltaTable.forPath(session, location)


def delta_log(session, where: Located):
    """Delta's JVM `DeltaLog` of the table (its snapshots and their state); classic sessions only."""
    return delta_table(session, where)._jdt.deltaLog()


def latest_snapshot(session, log):
    """The table's latest snapshot (Delta's JVM `Snapshot`), read from the log if it moved."""
    none = session._jvm.scala.Option.empty()
    return log.update(False, none, none)


def latest_transactions(session, log):
    """The txn app ids and versions of the table's latest snapshot (a JVM map), which Delta
    aggregates from the table's state once per snapshot."""
    return latest_snapshot(session, log).transactions()


def table_property(session, where: Located, key: str, log=None) -> str | None:
    """A property of the table's latest version. On a classic session it is read from the
    latest snapshot's metadata (`log`: the table's DeltaLog, kept by a caller that asks
    often): a listing of the log and no Spark job, and the snapshot the next commit
    starts from. On Spark Connect, DESCRIBE DETAIL."""
    if is_connect(session):
        row = delta_table(session, where).detail().select("properties").first()
        return (dict(row.properties or {}) if row else {}).get(key)
    found = latest_snapshot(session, log or delta_log(session, where)).metadata().configuration().get(key)
    return str(found.get()) if found.isDefined() else None


def set_table_properties(session, where: Located, values: Mapping[str, str]) -> None:
    """ALTER TABLE ... SET TBLPROPERTIES: one commit, keys not named left as they are."""
    assignments = ", ".join(f"{_sql_text(key)} = {_sql_text(value)}" for key, value in values.items())
    session.sql(f"ALTER TABLE {sql_name_of(where)} SET TBLPROPERTIES ({assignments})")


def sql_name_of(where: Located) -> str:
    """The table as SQL names it: its catalog name, or delta.`path` (a local path absolute, as
    the table is made there: `builder_location`)."""
    return where.table or "delta.`" + builder_location(where.path or "").replace("`", "``") + "`"


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def checkpoint_position(log, snapshot) -> tuple[int, int, int]:
    """The snapshot's version, the version of its last checkpoint (-1: none), and the table's
    `delta.checkpointInterval` (Delta checkpoints in the committing thread at its multiples)."""
    return (snapshot.version(), snapshot.checkpointProvider().version(),
            log.checkpointInterval(snapshot.metadata()))


def write_checkpoint(session, log, snapshot) -> None:
    """A checkpoint of `snapshot`, then the log's clean-up: what Delta's own post-commit
    checkpoint does (a failure is logged by Delta, not raised)."""
    log.checkpoint(snapshot, session._jvm.scala.Option.empty())


def table_exists(session, where: Located) -> bool:
    if where.table:
        return session.catalog.tableExists(where.table)
    if is_connect(session):
        from ingest.platform.delta_sql import is_delta_table

        return is_delta_table(session, where.path)
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(session, where.path)


def clear_unborn_log(path: str) -> None:
    """Called before a table is created at `path`. Delta 4.4 makes
    `_delta_log/_staged_commits/` before a table's first commit, and writes that commit to
    a hidden temporary file it then renames; a run killed before the rename leaves a log
    of empty folders and, at most, such a file: `createIfNotExists` takes it for a table
    and then fails to find it (DELTA_TABLE_NOT_FOUND, on every later run). Such a log, one
    with no file but hidden ones (no commit, checkpoint or checksum), is removed; a log
    holding any other file is left to Delta."""
    local = local_path(path)
    log = None if local is None else local / "_delta_log"
    if log is None or not log.is_dir():
        return
    files = [p for p in log.rglob("*") if p.is_file()]
    if any(not p.name.startswith(".") for p in files):
        return
    for file in files:
        file.unlink()
    for folder in sorted(log.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        folder.rmdir()
    log.rmdir()


def table_builder(session):
    """`DeltaTable.createIfNotExists(session)`, or its SQL stand-in on Spark Connect."""
    if is_connect(session):
        from ingest.platform.delta_sql import SqlTableBuilder

        return SqlTableBuilder(session)
    from delta.tables import DeltaTable

    return DeltaTable.createIfNotExists(session)


def table_builder_at(session, where: Located):
    """`table_builder`, named or located as `where` is, its path first cleared of an unborn log."""
    if where.path:
        clear_unborn_log(where.path)
    builder = table_builder(session)
    return builder.tableName(builder_name(where.table)) if where.table else builder.location(
        builder_location(where.path))


def read(session, where: Located):
    """The table's rows as a DataFrame (no DeltaTable object needed)."""
    return session.read.table(where.table) if where.table else session.read.format("delta").load(where.path)


def is_path(location: str) -> bool:
    """A location a user typed is a path (or URI) when it has a slash or a scheme;
    else it is a catalog name such as `main.sales.orders`."""
    return "/" in location or ":" in location


def is_uri(location: str) -> bool:
    """A location with a scheme (`s3://`, `abfss://`, `dbfs:`), not a local path."""
    return bool(_URI_SCHEME.match(location))


def builder_name(table: str) -> str:
    """OSS Delta's table builder parses `[db.]table` only, in the session catalog:
    `spark_catalog.db.t` is given as `db.t`, the same table. Other names pass as
    they are (Databricks documents `catalog.schema.table` for its builder)."""
    parts = _NAME_PART.findall(table)
    if len(parts) == 3 and parts[0].strip("`").lower() == "spark_catalog":
        return ".".join(parts[1:])
    return table


def builder_location(path: str) -> str:
    """Delta's table builder parses its location as a `delta.`path`` name, and a relative
    path such as `./.ingest/data/t` (conf/local.yaml's DATA_ROOT) fails there with
    INVALID_ATTRIBUTE_NAME_SYNTAX; a local path is made absolute, a URI passes as it is."""
    return path if is_uri(path) else os.path.abspath(path)
