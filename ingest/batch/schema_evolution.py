"""What a batch's columns may change in the target: `schema_evolution` in the spec.

Checked before anything of the batch is written (dead letters included), so a
refused change leaves the batch unwritten and the run stopped with the column
named; the restart after the fix processes the same batch again.

- A new payload column: `add_columns` lets the MERGE add it as a nullable column
  (Delta schema evolution; older rows read null); `fail` stops.
- Always refused, whatever the policy, because Delta cannot take them: a column
  whose type changed, and a NOT NULL target column the batch no longer has.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from ingest.errors import IngestError


class SchemaChangeRefused(IngestError):
    """The batch's columns differ from the target's in a way the pipeline does not allow."""


def check(target: StructType, batch: StructType, policy: str, where: str) -> None:
    """Raise SchemaChangeRefused naming every refused column; return if all is allowed."""
    have = {f.name.lower(): f for f in target.fields}
    given = {f.name.lower(): f for f in batch.fields}
    refused = [f"column {f.name} ({f.dataType.simpleString()}) is new" for key, f in given.items()
               if key not in have and policy == "fail"]
    refused += [f"column {f.name} is {have[key].dataType.simpleString()} in the target and "
                f"{f.dataType.simpleString()} in the batch (Delta cannot change a column's type)"
                for key, f in given.items()
                if key in have and not _same_type(have[key].dataType, f.dataType)]
    # ingest's own columns (_uid, _sequence, SCD2's _valid_from, ...) are the merge mode's business
    refused += [f"column {f.name} is NOT NULL in the target and gone from the payload"
                for key, f in have.items()
                if key not in given and not f.nullable and not key.startswith("_")]
    if refused:
        hint = (" (schema_evolution: fail; set add_columns to let new columns in)"
                if policy == "fail" and any(r.endswith("is new") for r in refused) else "")
        raise SchemaChangeRefused(f"schema change refused for {where}: {'; '.join(refused)}{hint}; "
                                  "nothing of this batch was written")


def _same_type(target, batch) -> bool:
    """Equal up to nullability, and with struct fields the batch may add (Delta merges those)."""
    if isinstance(target, StructType) and isinstance(batch, StructType):
        fields = {f.name.lower(): f.dataType for f in target.fields}
        return all(_same_type(fields[f.name.lower()], f.dataType)
                   for f in batch.fields if f.name.lower() in fields)
    return _without_nullability(target) == _without_nullability(batch)


def _without_nullability(kind) -> str:
    return kind.simpleString()
