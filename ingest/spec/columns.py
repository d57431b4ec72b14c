"""The columns ingest adds to a target, and the column checks that need no Spark.

`INGEST_COLUMNS` are on every target, `CHANGE_COLUMNS` with cdc, deletes or history:
a payload may not use their names. Column references (uid, cdc.key, order_by,
partition_by...) are checked against the schema when the DDL can be read here;
with a transform, or a registry schema, the Spark pass (`sql_check`) knows them.
"""

from __future__ import annotations

import re

from ingest.spec.model import (
    REGISTRY_FORMATS,
    Cdc,
    Source,
    Target,
    Transform,
    Uid,
)
from ingest.spec.values import Check, did_you_mean

UID = "_uid"  # the record's identity in the target
SEQUENCE = "_sequence"  # a change's place in its key's order (cdc.sequence)
OP = "_op"  # a change's Debezium op: c, r, u or d
DELETE = "d"  # the op that deletes its key
# Columns ingest adds to the target; the payload may not use them.
INGEST_COLUMNS = (UID, "_topic", "_partition", "_offset", "_kafka_timestamp", "_ingested_at")
# ... and with cdc, deletes or history
CHANGE_COLUMNS = (SEQUENCE, OP, "_deleted", "_valid_from", "_valid_to", "_current")
TIMESTAMP_TYPES = ("TIMESTAMP", "TIMESTAMP_LTZ")
# `cdc.sequence` values that name the envelope rather than a row column
ENVELOPE_SEQUENCES = ("ts_ms",)
ENVELOPE_SOURCE_PREFIX = "source."


def check_columns(c: Check, source: Source, transform: Transform | None, uid: Uid, target: Target,
             cdc: Cdc | None) -> None:
    """Column references checked against the schema when no transform reshapes it;
    with a transform the Spark pass (sql_check) knows the columns."""
    columns = decoded_columns(source)
    if columns is None:
        return
    horizon = target.dedup_horizon
    if horizon is not None and horizon.column in columns:
        if columns[horizon.column] not in TIMESTAMP_TYPES:
            c.add("bad_column", "target.dedup_horizon.column", f"column {horizon.column!r} is "
                  f"{columns[horizon.column]}; expected a TIMESTAMP column")
    for column in cdc.encodings if cdc else ():
        if column not in columns:
            c.add("bad_column", f"cdc.encodings.{column}", f"{column!r} is not a column of the "
                  f"payload; expected one of {', '.join(columns)}{did_you_mean(column, list(columns))}")
    if transform is not None:
        return
    reserved = INGEST_COLUMNS + (CHANGE_COLUMNS if cdc or target.deletes != "soft"
                                 or uid.key else ())
    for path, column in column_references(uid, target, cdc):
        if column not in columns:
            c.add("bad_column", path, f"{column!r} is not a column of the payload; expected one of "
                  f"{', '.join(columns)}{did_you_mean(column, list(columns))}")
    for column in reserved:
        if column in columns:
            c.add("bad_column", "source.schema", f"column {column} is one ingest adds; expected "
                  "another name (or rename it in transform.select)")


def column_references(uid: Uid, target: Target, cdc: Cdc | None = None) -> list[tuple[str, str]]:
    """(key path, column) for every column the spec names outside SQL."""
    if cdc is not None:
        refs = [(f"cdc.key[{n}]", name) for n, name in enumerate(cdc.key)]
        listed = isinstance(cdc.sequence, tuple)
        refs += [(f"cdc.sequence[{n}]" if listed else "cdc.sequence", name)
                 for n, name in enumerate(cdc.sequence_items) if not is_envelope_sequence(name)]
    else:
        refs = [("uid.field", uid.field)] if uid.field else []
        refs += [(f"uid.fields[{n}]", name) for n, name in enumerate(uid.fields)]
    refs += [("target.order_by", target.order_by)] if target.order_by else []
    refs += [(f"target.partition_by[{n}]", name) for n, name in enumerate(target.partition_by)]
    refs += [(f"target.cluster_by[{n}]", name) for n, name in enumerate(target.cluster_by)]
    if target.dedup_horizon is not None:
        refs.append(("target.dedup_horizon", target.dedup_horizon.column))
    return refs


def is_envelope_sequence(sequence: str) -> bool:
    """`ts_ms` and `source.<field>` name the change envelope; anything else a row column."""
    return sequence in ENVELOPE_SEQUENCES or sequence.startswith(ENVELOPE_SOURCE_PREFIX)


def decoded_columns(source: Source) -> dict[str, str] | None:
    """Payload column -> upper-case type word, before transform; None if the DDL is
    too unusual to read without Spark (Spark's own parser then decides)."""
    if source.format == "string":
        return {"value": "STRING"}
    if source.format == "bytes":
        return {"value": "BINARY"}
    if source.format in REGISTRY_FORMATS:
        return None  # the reader schema is known at run time (registry) or to the Spark pass
    if source.schema is None:
        return None  # json with cdc and no schema: the columns come with the messages
    return ddl_columns(source.schema)


def ddl_columns(ddl: str) -> dict[str, str] | None:
    columns = {}
    for part in _top_level_split(ddl):
        match = re.fullmatch(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s*([A-Za-z_]+)\b.*", part,
                             re.DOTALL)
        if match is None:
            return None
        columns[match.group(1).strip("`")] = match.group(2).upper()
    return columns or None


def _top_level_split(ddl: str) -> list[str]:
    """Split on commas outside <...>, (...) and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, None
    for char in ddl:
        if quote:
            quote = None if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts

