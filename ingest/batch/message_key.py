"""A change's key columns from the message key's schema: Debezium's JSON key converter
(`schemas.enable=true`, its default) writes each Kafka key as `{schema, payload}`, the schema a
struct of the table's primary key (or `message.key.columns`) fields, for `cdc` with
`format: json`, no `source.schema` and no `cdc.key`.

The key is a table's, not a record's: its columns make the uid every MERGE matches on, so it
is fixed when the table gets its first batch and kept on the table (the property
`ingest.cdc.key`, written when the table is created). Each batch lists the distinct key schemas
of each topic in the aggregation that lists its envelope schemas (`message_columns`): a record
whose key carries no schema (a tombstone's key carries one) is decoded with the key the table
already has, since its key values are in its row. A key schema that names other fields than the
table's key is refused before anything is written, naming the topic and both field lists: a
new key would give the same rows other uids. A `cdc.key` in the YAML wins, checked against the
key schemas where the messages carry them. No key at all (a new table whose batch has no key
with a schema: a table without a primary key, or a key converter without schemas) stops the
run naming the topic: every record of the table would need it, so a dead letter per record
would only move the whole table aside.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

from pyspark.sql import types as T

from ingest.batch.merge.properties import recorded_key
from ingest.batch.schema_evolution import SchemaChangeRefused
from ingest.errors import IngestError
from ingest.spec.model import Pipeline


class NoKey(IngestError):
    """A table's key comes from its message keys' schemas, and none of them (nor the table) gives it."""


class KeyChangeRefused(SchemaChangeRefused):
    """A topic's message key names other fields than its table's key (or cdc.key)."""


def key_fields(text: str | None) -> list[dict]:
    """The field schemas of one message key's schema (the text of its `schema.fields`), in
    order; none where it is not a list of named fields (a key without a schema, or a key
    that is one value rather than a struct)."""
    try:
        fields = json.loads(text) if text else None
    except ValueError:
        return []
    if not isinstance(fields, list):
        return []
    return [f for f in fields if isinstance(f, dict) and isinstance(f.get("field"), str)]


def key_names(text: str | None) -> tuple[str, ...]:
    return tuple(f["field"] for f in key_fields(text))


def topic_key(topic: str, texts: Sequence[str]) -> tuple[str, ...]:
    """The key fields a topic's message keys name in this batch; () where none carries a schema.
    Two different lists in one batch: refused, naming both."""
    found = sorted({names for names in map(key_names, texts) if names})
    if len(found) > 1:
        raise KeyChangeRefused(
            f"topic {topic}: the message key's schema names {_listed(found[0])} in one record of the "
            f"batch and {_listed(found[1])} in another; a table's key may not change (its rows would "
            "get other uids); nothing of this batch was written")
    return found[0] if found else ()


def table_key(key_schemas: Mapping[str, Sequence[str]], declared: tuple[str, ...],
              known: tuple[str, ...], row: T.StructType) -> tuple[str, ...]:
    """The key columns of one table's batch. `key_schemas`: topic -> the distinct texts of its
    message keys' schemas; `declared`: cdc.key (() where the key comes from the messages);
    `known`: the key the table already has (the last batch's, or its recorded property), ()
    for a table not made yet. Sets of names are compared (the order of a composite key is its
    first one's: the uid hashes the columns in that order)."""
    named = {topic: topic_key(topic, texts) for topic, texts in sorted(key_schemas.items())}
    named = {topic: names for topic, names in named.items() if names}
    have, where = (declared, "cdc.key") if declared else (known, "the table's key")
    for topic, names in named.items():
        if have and _same(names, have):
            continue
        if have:
            raise KeyChangeRefused(
                f"topic {topic}: the message key's schema names {_listed(names)}, {where} is "
                f"{_listed(have)}; a table's key may not change (its rows would get other uids); "
                "nothing of this batch was written; expected "
                + ("a cdc.key naming the key's fields, or no cdc.key (then the key is the message "
                   "key's fields)" if declared else
                   "the same key, or the new key's rows in a new table (a topic of its own)"))
        have, where = names, f"the message key's schema of topic {topic}"
    if not have:
        raise NoKey(
            f"topic {', '.join(sorted(key_schemas)) or '(none)'}: its key columns come from the "
            "message key's schema (cdc with format json, no source.schema and no cdc.key), but no "
            "record of the batch has a key with a schema and its table has no key yet; expected "
            "Debezium's JSON key converter with schemas.enable=true (its default) and a source "
            "table with a primary key (or message.key.columns), or a cdc.key")
    columns = {f.name.lower() for f in row.fields}
    missing = [name for name in have if name.lower() not in columns]
    if missing:
        raise KeyChangeRefused(
            f"topic {', '.join(sorted(key_schemas))}: the key {_listed(have)} ({where}) names "
            f"{_listed(tuple(missing))}, which the row does not have (its columns: "
            f"{', '.join(f.name for f in row.fields)}); nothing of this batch was written")
    return have


def key_row(key_schemas: Sequence[str]) -> list[dict]:
    """The field schemas of the first key schema of a topic's batch: the row a table's first
    batch makes it with when no record carries a row schema (tombstones only)."""
    return next((fields for fields in map(key_fields, key_schemas) if fields), [])


def _same(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    return {name.lower() for name in one} == {name.lower() for name in other}


def _listed(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(names) + "]"


@dataclass
class KeyFromMessages:
    """A processor's key from batch to batch: the table's recorded key read once (when the
    table exists at the processor's first batch), then the last batch's."""

    pipeline: Pipeline  # as the YAML has it: cdc.key, or () where the key comes from the messages
    _key: tuple[str, ...] | None = None

    def keyed(self, session, pipeline: Pipeline, key_schemas: Mapping[str, Sequence[str]],
              row: T.StructType) -> Pipeline:
        """`pipeline` with this batch's key as its cdc.key and uid, or why not (before anything
        of the batch is written)."""
        assert self.pipeline.cdc is not None
        declared = self.pipeline.cdc.key
        if self._key is None:  # cdc.key wins: the table's recorded key is not read then
            self._key = () if declared else recorded_key(session, self.pipeline)
        self._key = table_key(key_schemas, declared, self._key, row)
        return pipeline if pipeline.cdc is not None and pipeline.cdc.key == self._key \
            else pipeline.with_key(self._key)
