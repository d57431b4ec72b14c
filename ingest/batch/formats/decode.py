"""Raw Kafka records -> payload columns, or the reason they could not be decoded.

Column logic only; the staged columns are `batch.staged`'s.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingest.batch.staged import NULL_VALUE, RAW, RAW_FIELDS, REASON, STAGE

_CORRUPT = "__corrupt"


def decode(raw: DataFrame, fmt: str, schema) -> DataFrame:
    """Columns RAW, STAGE, REASON, then the payload columns. `schema` is the JSON
    payload's StructType, or for avro and protobuf the run's `SchemaDecoder`."""
    with_raw = raw.select(F.struct(*[F.col(c) for c in RAW_FIELDS]).alias(RAW))
    if fmt in ("avro", "protobuf"):
        return schema.decode(with_raw, RAW, STAGE, REASON)
    if fmt == "string":
        return _ok(with_raw, F.col(f"{RAW}.value").cast("string").alias("value"))
    if fmt == "bytes":
        return _ok(with_raw, F.col(f"{RAW}.value").alias("value"))
    return _decode_json(with_raw, schema)


def _ok(frame: DataFrame, *payload: Column) -> DataFrame:
    return frame.select(RAW, F.lit(None).cast("string").alias(STAGE),
                        F.lit(None).cast("string").alias(REASON), *payload)


def _decode_json(frame: DataFrame, schema: StructType) -> DataFrame:
    parse_schema = StructType([f.__class__(f.name, f.dataType, True) for f in schema.fields])
    parse_schema = parse_schema.add(_CORRUPT, "string")
    text = F.col(f"{RAW}.value").cast("string")
    parsed = frame.select(RAW, F.from_json(text, parse_schema,
                                           {"columnNameOfCorruptRecord": _CORRUPT}).alias("p"))
    reason = _json_failure(schema)
    names = [f.name for f in schema.fields]
    return parsed.select(
        RAW,
        F.when(reason.isNotNull(), F.lit("decode")).alias(STAGE),
        reason.alias(REASON),
        *[F.col(f"p.`{name}`").alias(name) for name in names],
    )


def _json_failure(schema: StructType) -> Column:
    """Why a record is not a valid payload, or null when it is."""
    value = F.col(f"{RAW}.value")
    checks = [
        (value.isNull(), F.lit(NULL_VALUE)),
        (F.col("p").isNull(), F.lit("not a JSON object")),
        (F.col(f"p.{_CORRUPT}").isNotNull(),
         F.lit("malformed JSON or a value of the wrong type for the schema")),
    ]
    for field in schema.fields:
        if not field.nullable:
            checks.append((F.col(f"p.`{field.name}`").isNull(),
                           F.lit(f"missing required field '{field.name}'")))
    reason = F.lit(None).cast("string")
    for failed, why in reversed(checks):
        reason = F.when(failed, why).otherwise(reason)
    return reason
