"""Raw Kafka records -> payload columns, or the reason they could not be decoded.

Column logic only; the staged columns are `batch.staged`'s.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingest.batch.formats.variant import VariantDecoder
from ingest.batch.staged import NULL_VALUE, RAW, RAW_FIELDS, REASON, STAGE, UNKNOWN_FIELDS

_CORRUPT = "__corrupt"


def decode(raw: DataFrame, fmt: str, schema, unknown_fields: str = "ignore") -> DataFrame:
    """Columns RAW, STAGE, REASON, then the payload columns. `schema` is the JSON
    payload's StructType (for `schema: variant` a `VariantDecoder`), or for avro and
    protobuf the run's `SchemaDecoder`.
    `unknown_fields` (json): what a top-level field the schema does not name does; with
    warn, RAW carries their names (UNKNOWN_FIELDS) for the batch's count."""
    if fmt == "json" and unknown_fields != "ignore":
        return _decode_json(raw.select(F.struct(*[F.col(c) for c in RAW_FIELDS], *(
            [_unknown(F.col("value").cast("string"), schema).alias(UNKNOWN_FIELDS)]
            if unknown_fields == "warn" else [])).alias(RAW)), schema, unknown_fields)
    with_raw = raw.select(F.struct(*[F.col(c) for c in RAW_FIELDS]).alias(RAW))
    if fmt in ("avro", "protobuf") or isinstance(schema, VariantDecoder):
        return schema.decode(with_raw, RAW, STAGE, REASON)
    if fmt == "string":
        return _ok(with_raw, F.col(f"{RAW}.value").cast("string").alias("value"))
    if fmt == "bytes":
        return _ok(with_raw, F.col(f"{RAW}.value").alias("value"))
    return _decode_json(with_raw, schema)


def _ok(frame: DataFrame, *payload: Column) -> DataFrame:
    return frame.select(RAW, F.lit(None).cast("string").alias(STAGE),
                        F.lit(None).cast("string").alias(REASON), *payload)


def _unknown(text: Column, schema: StructType) -> Column:
    """The record's top-level fields the schema does not name, ", "-joined; null if none
    (or not a JSON object). Costs a second, shallow parse of each record."""
    names = F.array(*[F.lit(f.name) for f in schema.fields])
    unknown = F.array_except(F.json_object_keys(text), names)
    return F.when(F.size(unknown) > 0, F.array_join(unknown, ", "))


def _unknown_reason(text: Column, schema: StructType) -> Column:
    """The dead letter's reason: each unknown field, with the schema's name it may mean."""
    names = F.array(*[F.lit(f.name) for f in schema.fields])

    def hinted(name: Column) -> Column:
        near = F.filter(names, lambda known: F.levenshtein(F.lower(name), F.lower(known)) <= 3)
        return F.concat(name, F.coalesce(F.concat(F.lit(" (did you mean "), F.get(near, 0), F.lit("?)")),
                                         F.lit("")))

    unknown = F.array_except(F.json_object_keys(text), names)
    return F.concat(F.lit("fields the schema does not name: "), F.array_join(F.transform(unknown, hinted), ", "),
                    F.lit("; expected only the schema's fields (source.unknown_fields: dead_letter)"))


def _decode_json(frame: DataFrame, schema: StructType, unknown_fields: str = "ignore") -> DataFrame:
    parse_schema = StructType([f.__class__(f.name, f.dataType, True) for f in schema.fields])
    parse_schema = parse_schema.add(_CORRUPT, "string")
    text = F.col(f"{RAW}.value").cast("string")
    parsed = frame.select(RAW, F.from_json(text, parse_schema,
                                           {"columnNameOfCorruptRecord": _CORRUPT}).alias("p"))
    failures = _json_failures(schema, text)
    if unknown_fields == "dead_letter":  # before the missing fields: a misspelt name explains both
        unknown = F.array_except(F.json_object_keys(text), F.array(*[F.lit(f.name) for f in schema.fields]))
        failures.insert(3, (F.size(unknown) > 0, _unknown_reason(text, schema)))
    failed = F.lit(False)
    for condition, _ in failures:
        failed = failed | condition
    reason = F.lit(None).cast("string")
    for condition, why in reversed(failures):
        reason = F.when(condition, why).otherwise(reason)
    names = [f.name for f in schema.fields]
    return parsed.select(
        RAW,
        # the stage from the checks alone: the reason's text, which may read the record again
        # field by field, is left for the dead letters (the batch's counting pass never reads it)
        F.when(failed, F.lit("decode")).alias(STAGE),
        reason.alias(REASON),
        *[F.col(f"p.`{name}`").alias(name) for name in names],
    )


def _json_failures(schema: StructType, text: Column) -> list[tuple[Column, Column]]:
    """(condition, reason) of each way a record is not a valid payload, first match wins."""
    value = F.col(f"{RAW}.value")
    checks = [
        (value.isNull(), F.lit(NULL_VALUE)),
        (F.col("p").isNull(), F.lit("not a JSON object")),
        (F.col(f"p.{_CORRUPT}").isNotNull(), _wrong_value(schema, text)),
    ]
    for field in schema.fields:
        if not field.nullable:
            checks.append((F.col(f"p.`{field.name}`").isNull(),
                           F.lit(f"missing required field '{field.name}' (the column is NOT NULL)")))
    return checks


_SHOWN = 200  # characters of a value or record shown in a reason


def _wrong_value(schema: StructType, text: Column) -> Column:
    """The first field whose value as written did not parse as its type (from_json keeps
    the fields that did and nulls the one that did not), else the record is not JSON."""
    checks = _field_checks(schema.fields, (), text)
    shown = F.concat(F.lit("'"), F.substring(text, 1, _SHOWN), F.lit("'"))
    malformed = F.when(F.ltrim(text).startswith("{"), F.concat(F.lit("malformed JSON: "), shown)) \
        .otherwise(F.concat(F.lit("not a JSON object: "), shown))
    return F.coalesce(*checks, malformed) if checks else malformed


def _field_checks(fields, parents: tuple[str, ...], text: Column) -> list[Column]:
    """Deepest fields first: a struct whose one field is wrong is reported by that field."""
    checks: list[Column] = []
    for field in fields:
        path = parents + (field.name,)
        if isinstance(field.dataType, StructType):
            checks += _field_checks(field.dataType.fields, path, text)
        written = F.get_json_object(text, "$" + "".join(f"['{name}']" for name in path))
        parsed = F.col("p." + ".".join(f"`{name}`" for name in path))
        why = F.concat(F.lit(f"field {'.'.join(path)}: value '"), F.substring(written, 1, _SHOWN),
                       F.lit(f"' is not {_expected(field.dataType)}"))
        checks.append(F.when(written.isNotNull() & parsed.isNull(), why))
    return checks


_EXPECTED = {
    "date": 'text yyyy-MM-dd, e.g. "2026-11-28"',
    "timestamp": 'ISO 8601 text, e.g. "2026-11-28T09:30:00Z"',
    "timestamp_ntz": 'ISO 8601 text, e.g. "2026-11-28T09:30:00"',
    "boolean": "true or false",
    "tinyint": "a JSON number, e.g. 7", "smallint": "a JSON number, e.g. 7", "int": "a JSON number, e.g. 7",
    "bigint": "a JSON number, e.g. 7", "float": "a JSON number, e.g. 2.5", "double": "a JSON number, e.g. 2.5",
}


def _expected(data_type) -> str:
    name = data_type.simpleString()
    shown = name if "struct<" in name else name.upper()  # a struct's field names as declared
    article = "an" if name[0] in "aeiou" else "a"
    hint = _EXPECTED.get(name) or ("a JSON number or numeric text, e.g. 2.50" if name.startswith("decimal")
                                   else None)
    return f"{article} {shown} (expected {hint})" if hint else f"{article} {shown}"
