"""A MERGE's WHEN clauses written once, then rendered two ways: as SQL text for
`ingest plan`, and as DeltaMergeBuilder calls for the run. So the plan shows the
clauses that run, and a mode cannot change one without the other.

No Spark here: `apply` only calls the builder it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class When:
    """One WHEN clause. `action`: "update *", "insert *", "delete", or "update" of the
    `columns` named, each from the source row."""

    matched: bool
    action: str
    condition: str | None = None
    columns: tuple[str, ...] = ()


def to_sql(clauses: Sequence[When]) -> list[str]:
    return [_sql(clause) for clause in clauses]


def _sql(clause: When) -> str:
    when = "WHEN MATCHED" if clause.matched else "WHEN NOT MATCHED"
    if clause.condition:
        when += f" AND {clause.condition}"
    if clause.action == "update":
        return f"{when} THEN UPDATE SET " + ", ".join(f"{c} = s.{c}" for c in clause.columns)
    return f"{when} THEN " + {"update *": "UPDATE SET *", "insert *": "INSERT *", "delete": "DELETE"}[clause.action]


def apply(builder, clauses: Sequence[When]):
    """The builder with each clause added in order (Delta tries them in that order)."""
    for clause in clauses:
        builder = _added(builder, clause)
    return builder


def _added(builder, clause: When):
    condition = clause.condition
    if not clause.matched:
        if clause.action != "insert *":
            raise ValueError(f"WHEN NOT MATCHED cannot {clause.action}")
        return builder.whenNotMatchedInsertAll(condition=condition)
    if clause.action == "update *":
        return builder.whenMatchedUpdateAll(condition=condition)
    if clause.action == "delete":
        return builder.whenMatchedDelete(condition=condition)
    if clause.action == "update":
        return builder.whenMatchedUpdate(condition=condition, set={c: f"s.`{c}`" for c in clause.columns})
    raise ValueError(f"WHEN MATCHED cannot {clause.action}")
