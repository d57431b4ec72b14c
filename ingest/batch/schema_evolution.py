"""What a batch's columns may change in the target: `schema_evolution` in the spec.

Checked before anything of the batch is written (dead letters included), so a
refused change leaves the batch unwritten and the run stopped with the column
named; the restart after the fix processes the same batch again.

- A new payload column: `add_columns` lets the MERGE add it as a nullable column
  (Delta schema evolution; older rows read null); `fail` stops.
- `widen`: `add_columns`, and a column whose type grew in a way Delta's type
  widening (`delta.enableTypeWidening`, which ingest turns on for it) changes in
  place when MERGE WITH SCHEMA EVOLUTION meets it (WIDENINGS); older rows read
  the wider type, files are not rewritten.
- Always refused, whatever the policy, because Delta cannot take them: any other
  change of a column's type (named with both types), and a NOT NULL target
  column the batch no longer has.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructType,
    TimestampNTZType,
)

from ingest.errors import IngestError


class SchemaChangeRefused(IngestError):
    """The batch's columns differ from the target's in a way the pipeline does not allow."""


WIDEN = "widen"
# What MERGE WITH SCHEMA EVOLUTION widens by itself on a table with type widening (Delta
# 4.x): a wider integer, float to double, date to timestamp_ntz, a decimal with no fewer
# digits either side of the point. Integer to decimal or double Delta does only through
# ALTER TABLE, not in a MERGE, so ingest refuses it like any other change.
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


def widens(old: DataType, new: DataType) -> bool:
    """`new` is a widening of `old` that Delta's MERGE applies in place."""
    if isinstance(old, _INTEGERS) and isinstance(new, _INTEGERS):
        return _INTEGERS.index(type(new)) > _INTEGERS.index(type(old))
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return (new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
                and (new.precision, new.scale) != (old.precision, old.scale))
    return (isinstance(old, FloatType) and isinstance(new, DoubleType)) or (
        isinstance(old, DateType) and isinstance(new, TimestampNTZType))


def check(target: StructType, batch: StructType, policy: str, where: str) -> None:
    """Raise SchemaChangeRefused naming every refused column; return if all is allowed."""
    have = {f.name.lower(): f for f in target.fields}
    given = {f.name.lower(): f for f in batch.fields}
    refused = [f"column {f.name} ({f.dataType.simpleString()}) is new" for key, f in given.items()
               if key not in have and policy == "fail"]
    refused += [f"column {f.name} is {have[key].dataType.simpleString()} in the target and "
                f"{f.dataType.simpleString()} in the batch ({_why_refused(policy, have[key].dataType, f.dataType)})"
                for key, f in given.items()
                if key in have and not _same_type(have[key].dataType, f.dataType)
                and not (policy == WIDEN and widens(have[key].dataType, f.dataType))]
    # ingest's own columns (_uid, _sequence, SCD2's _valid_from, ...) are the merge mode's business
    refused += [f"column {f.name} is NOT NULL in the target and gone from the payload"
                for key, f in have.items()
                if key not in given and not f.nullable and not key.startswith("_")]
    if refused:
        hint = (" (schema_evolution: fail; set add_columns to let new columns in)"
                if policy == "fail" and any(r.endswith("is new") for r in refused) else "")
        raise SchemaChangeRefused(f"schema change refused for {where}: {'; '.join(refused)}{hint}; "
                                  "nothing of this batch was written")


def _why_refused(policy: str, old: DataType, new: DataType) -> str:
    if policy == WIDEN:
        return ("a type Delta's MERGE does not widen to: it widens integers to wider integers, float "
                "to double, date to timestamp_ntz and a decimal to one with no fewer digits either "
                "side of the point")
    if widens(old, new):
        return "Delta's type widening could take it: set schema_evolution: widen"
    return "Delta cannot change a column's type"


def _same_type(target, batch) -> bool:
    """Equal up to nullability, and with struct fields the batch may add (Delta merges those)."""
    if isinstance(target, StructType) and isinstance(batch, StructType):
        fields = {f.name.lower(): f.dataType for f in target.fields}
        return all(_same_type(fields[f.name.lower()], f.dataType)
                   for f in batch.fields if f.name.lower() in fields)
    return _without_nullability(target) == _without_nullability(batch)


def _without_nullability(kind) -> str:
    return kind.simpleString()
