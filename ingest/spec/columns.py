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
from ingest.spec.variant_path import PAYLOAD, TIMESTAMPS, BadPath, VariantPath, is_path

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
    check_paths(c, uid, target, None if transform is not None else columns)
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
        if column not in columns and not is_path(column):  # a path: check_paths
            c.add("bad_column", path, f"{column!r} is not a column of the payload; expected one of "
                  f"{', '.join(columns)}{did_you_mean(column, list(columns))}")
    for column in reserved:
        if column in columns:
            c.add("bad_column", "source.schema", f"column {column} is one ingest adds; expected "
                  "another name (or rename it in transform.select)")


# the keys where a path in a VARIANT column may stand for a column
PATH_KEYS = ("uid.field", "uid.fields", "target.order_by", "target.dedup_horizon")


def check_paths(c: Check, uid: Uid, target: Target, columns: dict[str, str] | None) -> bool:
    """Each `payload:...` reference parses, reads a type its key can use, and (`columns`:
    the decoded payload, when no transform reshapes it) names a VARIANT column. True when
    every path is fine."""
    mark = c.mark()
    for key, reference in column_references(uid, target):
        if not is_path(reference):
            continue
        key = "target.dedup_horizon.column" if key == "target.dedup_horizon" else key
        if not key.startswith(PATH_KEYS):
            c.add("bad_path", key, f"{reference!r} is a path in a VARIANT column; expected a column "
                  "name here (a column transform.select extracts, e.g. \"payload:region::string AS region\")")
            continue
        try:
            path = VariantPath.parse(reference)
        except BadPath as error:
            c.add("bad_path", key, f"{reference!r} is not a path in a VARIANT column: {error}")
            continue
        _path_rules(c, key, reference, path, target, uid)
        if columns is not None and columns.get(path.column) != "VARIANT":
            variants = [name for name, kind in columns.items() if kind == "VARIANT"]
            expected = (f"{variants[0]}:<path>" if variants else
                        f"source.schema: variant (each record one VARIANT column, {PAYLOAD}) and {PAYLOAD}:<path>")
            c.add("bad_path", key, f"{path.column!r} is not a VARIANT column of the payload; expected {expected}")
    return not c.failed(mark)


def _path_rules(c: Check, key: str, reference: str, path: VariantPath, target: Target, uid: Uid) -> None:
    """What the key needs of the value: a TIMESTAMP for the horizon, an order for order_by."""
    if key == "target.dedup_horizon.column" and path.read_as not in TIMESTAMPS:
        c.add("bad_path", key, f"{reference!r} is read as {path.read_as.upper()}; expected a TIMESTAMP: end "
              "the path with ::timestamp")
    if key != "target.order_by":
        return
    if path.type is None:
        c.add("bad_path", key, f"{reference!r} has no type; expected the type to order by, e.g. "
              "payload:version::bigint")
    elif path.type == "variant":
        c.add("bad_path", key, f"{reference!r} is read as VARIANT, which has no order; expected a type "
              "that orders, e.g. payload:version::bigint")
    elif uid.key and target.mode == "upsert":
        c.add("bad_path", key, f"{reference!r}: tombstone deletes order by a column of the target; "
              "expected a column transform.select extracts, e.g. \"payload:version::bigint AS version\"")


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
    if source.variant:
        return {PAYLOAD: "VARIANT"}
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

