"""One writing pipeline per table, recorded in the table itself.

Several applications may share the tables of one catalog or root (a pattern each,
a checkpoint each: docs/many-topics.md). Each commits under its own txn app id and
ledger, so nothing in Delta stops two of them from writing one table, when their
patterns overlap or two topics render to one name: the table then takes two
streams of batches and its ledger two histories. So a table records the pipeline
that writes it, in the table property OWNER, and every batch checks it before it
writes anything (the dead letters, the lost ranges, the MERGE).

The property is set in the table's first commit (the CREATE TABLE: exactly one
creator wins version 0). A table made before this, or by hand, has none and is
adopted by the first pipeline that writes it (ALTER TABLE, its own commit; the
check reads the table again after it, so of two adopting at once the last one
keeps the table and the other is refused). After that the property changes only
when a user hands the table over (`hand_over_sql`).

No history is read: a table property lives in the table's metadata, which Delta
keeps in every snapshot and checkpoint (log clean-up, a RESTORE to before the
adoption, at worst, make the table unowned, and the next writer adopts it). On a
classic session the check reads the latest snapshot's metadata, which the MERGE's
transaction starts from an instant later: no Spark job. A metadata change
committed while the MERGE runs makes the MERGE fail Delta's conflict check
(`MetadataChangedException`), and its retry checks again first.

The identity is the pipeline's name, not its checkpoint: a pipeline whose
checkpoint was lost (and rebuilt, or moved) still writes its tables, as the
recovery from the target's ledger (by pipeline name) expects. Two copies of one
pipeline share its name; the lease keeps the second copy out (`stream.lease`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from ingest.errors import IngestError
from ingest.platform.connect import is_connect
from ingest.platform.delta import Located, delta_log, set_table_properties, sql_name_of, table_property
from ingest.spec.locations import shown_location

OWNER = "ingest.pipeline"
T = TypeVar("T")


class TableOwned(IngestError):
    """The table is written by another pipeline: another application's, or one renamed."""


def creation_properties(pipeline: str) -> dict[str, str]:
    """What a table's first commit records of the pipeline that makes it."""
    return {OWNER: pipeline}


def hand_over_sql(table: Located, pipeline: str) -> str:
    """The statement that gives the table to `pipeline` (its owner stopped first), to paste."""
    return f"ALTER TABLE {sql_name_of(table)} SET TBLPROPERTIES ('{OWNER}' = '{pipeline}')"


@dataclass
class OwnerCheck:
    """One table's check, kept by its batch function from batch to batch."""

    pipeline: str
    table: Located
    _log: Any = field(default=None, repr=False)  # the table's JVM DeltaLog, opened by the first check

    def __getstate__(self) -> dict:
        """On Spark Connect the batch function is pickled to a worker: no JVM handle goes."""
        return {**self.__dict__, "_log": None}

    def check(self, session, before_start: bool = False) -> None:
        """Returns when this pipeline writes the table (adopting it if no pipeline does);
        raises `TableOwned` naming the table, its owner and this pipeline otherwise.
        `before_start`: asked before the query starts, not in a batch (the message says so)."""
        owner = self.owner(session)
        if owner is None:
            set_table_properties(session, self.table, creation_properties(self.pipeline))
            owner = self.owner(session)  # another pipeline may have adopted it meanwhile
        if owner != self.pipeline:
            written = "the run stops before its query starts" if before_start else \
                "nothing of this batch was written"
            raise TableOwned(refusal(self.table, owner, self.pipeline, written))

    def rechecked(self, session, action: Callable[[], T]) -> Callable[[], T]:
        """`action` for `retry_conflicts`: each attempt after the first checks the table again
        first, since the conflict may have been its owner changing."""
        attempts = itertools.count()

        def attempt() -> T:
            if next(attempts):
                self.check(session)
            return action()
        return attempt

    def owner(self, session) -> str | None:
        if is_connect(session):
            return table_property(session, self.table, OWNER)
        if self._log is None:
            self._log = delta_log(session, self.table)
        return table_property(session, self.table, OWNER, self._log)


def refusal(table: Located, owner: str | None, pipeline: str, written: str) -> str:
    where = shown_location(table.table or table.path or "")
    return (f"{pipeline}: table {where} is written by pipeline {owner} (table property {OWNER}), not by "
            f"{pipeline}; {written}. Two applications would both write it, each "
            f"under its own transaction ids and ledger. Split the topics so that no topic matches two "
            f"applications' patterns and no two topics render to one table (`ingest status` of each "
            f"pipeline file lists the topics its pattern matches). To move the table to {pipeline} on "
            f"purpose, stop {owner} first, then: {hand_over_sql(table, pipeline)}")
