"""json records kept whole: each one VARIANT column, `payload` (`source.schema: variant`).

No schema to write: Spark 4 parses the text into its binary VARIANT encoding, Delta stores
it (table feature `variantType`), and readers query it with `payload:order.id::string` or
`variant_get`. A value that is not JSON is a `decode` dead letter, as with a DDL schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, VariantType

from ingest.batch.staged import NULL_VALUE
from ingest.spec.variant_path import PAYLOAD

_SHOWN = 200  # characters of a record shown in a reason, as `decode` shows them


@dataclass(frozen=True)
class VariantDecoder:
    """What `processor.payload_schema` gives for `schema: variant`: `decode.decode` hands it
    the raw records, as it hands avro and protobuf records to their `SchemaDecoder`."""

    columns: StructType = StructType([StructField(PAYLOAD, VariantType())])

    def decode(self, frame: DataFrame, raw: str, stage: str, reason: str) -> DataFrame:
        """RAW, STAGE, REASON and `payload`. `try_parse_json`, not `parse_json`: one malformed
        record must not fail the batch (ANSI SQL raises for the whole job)."""
        text = F.col(f"{raw}.value").cast("string")
        parsed = frame.select(raw, F.try_parse_json(text).alias(PAYLOAD))
        value, payload = F.col(f"{raw}.value"), F.col(PAYLOAD)
        why = F.when(value.isNull(), F.lit(NULL_VALUE)).when(
            payload.isNull(), F.concat(F.lit("malformed JSON: '"), F.substring(text, 1, _SHOWN), F.lit("'")))
        return parsed.select(raw, F.when(value.isNull() | payload.isNull(), F.lit("decode")).alias(stage),
                             why.alias(reason), payload)
