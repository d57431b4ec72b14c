"""The staged columns every step of a batch reads and writes, and the reasons a
record fails to decode.

Every staged row keeps the raw record in `RAW`, so any later step can still send
it to the dead letters with its evidence intact; `STAGE` names the step where it
failed and `REASON` says why. No Spark here: `plan` and the audit name these
columns without starting a session.
"""

from __future__ import annotations

RAW = "__raw"  # struct: topic, partition, offset, timestamp, key, value, headers
STAGE = "__stage"  # null while a record is fine; else decode | transform | uid | filtered
REASON = "__reason"
KEEP = "__to_merge"  # true on the row of its uid that reaches the MERGE
TOMBSTONE = "__tombstone"  # a key's delete: set when decoded, read until the rows are built

RAW_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
# With `source.unknown_fields: warn`, a RAW field: the names of the record's top-level fields
# the schema does not name (", "-joined), null when there are none
UNKNOWN_FIELDS = "unknown_fields"
UNKNOWN_FIELD_POLICIES = ("ignore", "warn", "dead_letter")

NULL_VALUE = "null value (tombstone)"
NOT_FRAMED = "not in the Confluent wire format (no magic byte 0 and 4-byte schema id)"


def unknown_schema(schema_id: int) -> str:
    return f"unknown schema id {schema_id}: the registry has no such schema"
