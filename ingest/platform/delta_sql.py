"""Delta tables through SQL alone, for Spark Connect.

Over Connect, delta-spark's `DeltaTable` needs Delta Connect's server plugin, which
is not there (docs/databricks.md); SQL needs only the delta-spark jar and extension.
`SqlDeltaTable` and `SqlTableBuilder` answer the part of `DeltaTable`'s and
`DeltaTableBuilder`'s API that `ingest` uses (`toDF`, `history`, `merge` with its
WHEN clauses, `createIfNotExists`), each as one SQL statement, so the merge modes,
the ledger and the audits run unchanged on either session. `platform.delta` hands
these out when the session has no JVM.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType


def sql_name(location: str, is_table: bool) -> str:
    """The table as SQL names it: a catalog name as it is, a path as delta.`path`."""
    return location if is_table else f"delta.`{location}`"


@dataclass(frozen=True)
class SqlDeltaTable:
    session: Any
    name: str  # sql_name's
    alias_name: str | None = None

    def alias(self, name: str) -> SqlDeltaTable:
        return replace(self, alias_name=name)

    def toDF(self) -> DataFrame:  # noqa: N802 - DeltaTable's name
        return self.session.table(self.name)

    def history(self, limit: int | None = None) -> DataFrame:
        return self.session.sql(f"DESCRIBE HISTORY {self.name}" + (f" LIMIT {int(limit)}" if limit else ""))

    def merge(self, source: DataFrame, condition: str) -> SqlMerge:
        return SqlMerge(self, source, condition)

    def detail(self) -> DataFrame:
        return self.session.sql(f"DESCRIBE DETAIL {self.name}")

    def optimize(self) -> SqlOptimize:
        return SqlOptimize(self)

    def vacuum(self, retention_hours: float | None = None) -> DataFrame:
        retain = f" RETAIN {retention_hours} HOURS" if retention_hours is not None else ""
        return self.session.sql(f"VACUUM {self.name}{retain}")


@dataclass(frozen=True)
class SqlOptimize:
    """DeltaOptimizeBuilder's two ways to run, as OPTIMIZE statements."""

    table: SqlDeltaTable

    def executeCompaction(self) -> DataFrame:  # noqa: N802
        return self.table.session.sql(f"OPTIMIZE {self.table.name}")

    def executeZOrderBy(self, *columns: str) -> DataFrame:  # noqa: N802
        return self.table.session.sql(f"OPTIMIZE {self.table.name} ZORDER BY ({', '.join(map(_quoted, columns))})")


@dataclass(frozen=True)
class SqlMerge:
    """A MERGE INTO statement built as DeltaMergeBuilder is, run by `execute`."""

    table: SqlDeltaTable
    source: DataFrame
    condition: str
    clauses: tuple[str, ...] = ()
    evolve: bool = False

    def withSchemaEvolution(self) -> SqlMerge:  # noqa: N802
        return replace(self, evolve=True)

    def whenMatchedUpdateAll(self, condition: str | None = None) -> SqlMerge:  # noqa: N802
        return self._when("MATCHED", condition, "UPDATE SET *")

    def whenMatchedUpdate(self, condition: str | None = None, set: dict | None = None) -> SqlMerge:  # noqa: N802, A002
        assignments = ", ".join(f"{_quoted(column)} = {value}" for column, value in (set or {}).items())
        return self._when("MATCHED", condition, f"UPDATE SET {assignments}")

    def whenMatchedDelete(self, condition: str | None = None) -> SqlMerge:  # noqa: N802
        return self._when("MATCHED", condition, "DELETE")

    def whenNotMatchedInsertAll(self, condition: str | None = None) -> SqlMerge:  # noqa: N802
        return self._when("NOT MATCHED", condition, "INSERT *")

    def _when(self, matched: str, condition: str | None, action: str) -> SqlMerge:
        clause = f"WHEN {matched}" + (f" AND {condition}" if condition else "") + f" THEN {action}"
        return replace(self, clauses=(*self.clauses, clause))

    def execute(self) -> DataFrame:
        """The MERGE's metrics row, as DeltaMergeBuilder.execute gives it (no row: Delta
        skipped the MERGE under a txn version already committed). The source is a temporary
        view of the session for the statement's length."""
        session = self.table.session
        view = f"ingest_merge_source_{uuid.uuid4().hex}"
        self.source.createOrReplaceTempView(view)
        try:
            evolution = " WITH SCHEMA EVOLUTION" if self.evolve else ""
            target = self.table.name + (f" AS {self.table.alias_name}" if self.table.alias_name else "")
            source_alias = _alias_of(self.source) or "s"
            statement = (f"MERGE{evolution} INTO {target} USING {view} AS {source_alias} "
                         f"ON {self.condition} " + " ".join(self.clauses))
            metrics = session.sql(statement)
            return session.createDataFrame(metrics.collect(), metrics.schema)
        finally:
            session.catalog.dropTempView(view)


def _alias_of(frame: DataFrame) -> str | None:
    """The alias a Connect DataFrame was given (`rows.alias("s")`), read from its plan."""
    plan = getattr(frame, "_plan", None)
    return getattr(plan, "_alias", None)


def _quoted(column: str) -> str:
    return column if column.startswith("`") or "." in column else f"`{column}`"


@dataclass
class SqlTableBuilder:
    """`DeltaTable.createIfNotExists(session)`'s builder, as CREATE TABLE IF NOT EXISTS."""

    session: Any
    name: str | None = None
    path: str | None = None
    columns: StructType = field(default_factory=StructType)
    properties: dict[str, str] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()

    def tableName(self, name: str) -> SqlTableBuilder:  # noqa: N802
        self.name = name
        return self

    def location(self, path: str) -> SqlTableBuilder:
        self.path = path
        return self

    def addColumns(self, columns: StructType) -> SqlTableBuilder:  # noqa: N802
        self.columns = StructType([*self.columns.fields, *columns.fields])
        return self

    def property(self, key: str, value: str) -> SqlTableBuilder:
        self.properties[key] = value
        return self

    def partitionedBy(self, *columns: str) -> SqlTableBuilder:  # noqa: N802
        self.partitions = columns
        return self

    def clusterBy(self, *columns: str) -> SqlTableBuilder:  # noqa: N802
        self.clusters = columns
        return self

    def execute(self) -> None:
        name = self.name or sql_name(self.path or "", is_table=False)
        statement = f"CREATE TABLE IF NOT EXISTS {name} ({self.columns.toDDL()}) USING delta"
        if self.partitions:
            statement += f" PARTITIONED BY ({', '.join(_quoted(c) for c in self.partitions)})"
        if self.clusters:
            statement += f" CLUSTER BY ({', '.join(_quoted(c) for c in self.clusters)})"
        if self.name and self.path:
            statement += f" LOCATION '{self.path}'"
        if self.properties:
            statement += " TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in self.properties.items()) + ")"
        self.session.sql(statement).collect()


def is_delta_table(session, path: str) -> bool:
    """Whether a Delta table is at `path`: its history reads."""
    from pyspark.errors import AnalysisException

    try:
        session.sql(f"DESCRIBE HISTORY {sql_name(path, is_table=False)} LIMIT 1").collect()
    except AnalysisException:  # no table there, or not a Delta one
        return False
    # anything else (a server that does not answer, a storage error) is raised: taken for "no
    # table", a transient error after a lost checkpoint would start from starting_offsets
    return True
