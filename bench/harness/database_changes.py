"""Debezium-shaped change events of a database's tables, and the rows they must leave.

The PostgreSQL connector's change event through Kafka Connect's JSON converter with its
schema in every message (`schemas.enable=true`, Debezium's default): `{schema, payload}`,
`source.lsn` the change's position. Each table has the five columns the tables share and
one of its own, whose type follows the table's number, as a database's tables differ.
`Changes` keeps what each topic's table must hold once every change is applied.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from decimal import Decimal

from confluent_kafka import Producer

PREFIX = "dbz"  # the topics: dbz.t000 ...

ROW_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "first_name"},
    {"type": "string", "optional": True, "field": "email"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "field": "balance"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1,
     "field": "updated_at"},
]
SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "lsn"},
]


OWN_TYPES = ("string", "int64", "float64", "boolean")


def own_field(table: str) -> tuple[str, str]:
    """A column only this table has, its type by the table's number: a database's tables differ
    in their columns, and a table's decode is built from its row."""
    number = int(table[1:]) if table[1:].isdigit() else 0
    return f"note_{table}", OWN_TYPES[number % len(OWN_TYPES)]


def own_value(kind: str, key: int, name: str):
    return {"string": name, "int64": key, "float64": key / 4, "boolean": key % 2 == 0}[kind]


def envelope_schema(table: str) -> str:
    """The JSON converter's schema of a PostgreSQL connector's change event, as text."""
    row = f"{PREFIX}.public.{table}.Value"
    name, kind = own_field(table)
    fields = [*ROW_FIELDS, {"type": kind, "optional": True, "field": name}]
    return json.dumps({"type": "struct", "optional": False, "name": f"{PREFIX}.public.{table}.Envelope",
                       "fields": [
                           {"type": "struct", "optional": True, "name": row, "field": "before", "fields": fields},
                           {"type": "struct", "optional": True, "name": row, "field": "after", "fields": fields},
                           {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source",
                            "field": "source", "fields": SOURCE_FIELDS},
                           {"type": "string", "optional": False, "field": "op"},
                           {"type": "int64", "optional": True, "field": "ts_ms"}]},
                      separators=(",", ":"))


def decimal_bytes(value: Decimal, scale: int = 2) -> str:
    """Connect's Decimal: the unscaled value, big-endian two's complement, base64 in JSON."""
    unscaled = int(value.scaleb(scale))
    return base64.b64encode(unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)).decode()


@dataclass
class Changes:
    """The changes produced, and each topic's rows as they must end (the source of truth)."""

    seed: int = 7
    lsn: int = 1_000_000
    live: dict[str, dict[int, tuple]] = field(default_factory=dict)  # topic -> id -> (first_name, email, balance)
    ids: dict[str, list[int]] = field(default_factory=dict)
    next_id: dict[str, int] = field(default_factory=dict)
    schemas: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rnd = random.Random(self.seed)

    def events(self, topic: str, count: int) -> list[tuple[bytes, bytes]]:
        live, ids = self.live.setdefault(topic, {}), self.ids.setdefault(topic, [])
        table = topic.split(".")[-1]
        schema = self.schemas.setdefault(topic, envelope_schema(table))
        out = []
        for _ in range(count):
            self.lsn += 1
            pick = self.rnd.random()
            if ids and pick < 0.1:
                index = self.rnd.randrange(len(ids))
                ids[index], ids[-1] = ids[-1], ids[index]
                key = ids.pop()
                op, before, after = "d", self._image(table, key, live.pop(key)), None
            elif ids and pick < 0.5:
                key = ids[self.rnd.randrange(len(ids))]
                old = live[key]
                live[key] = self._row(key)
                op, before, after = "u", self._image(table, key, old), self._image(table, key, live[key])
            else:
                key = self.next_id.get(topic, 1)
                self.next_id[topic] = key + 1
                ids.append(key)
                live[key] = self._row(key)
                op, before, after = "c", None, self._image(table, key, live[key])
            payload = {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000,
                       "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": PREFIX,
                                  "ts_ms": 1_700_000_000_000, "db": "shop", "schema": "public",
                                  "table": topic, "lsn": self.lsn}}
            value = '{"schema":' + schema + ',"payload":' + json.dumps(payload, separators=(",", ":")) + "}"
            out.append((json.dumps({"id": key}).encode(), value.encode()))
        return out

    def _row(self, key: int) -> tuple:
        n = self.rnd.randrange(10**6)
        return f"name-{key}-{n}", f"user{key}.{n}@example.org", Decimal(n).scaleb(-2)

    def _image(self, table: str, key: int, row: tuple) -> dict:
        name, kind = own_field(table)
        return {"id": key, "first_name": row[0], "email": row[1], "balance": decimal_bytes(row[2]),
                "updated_at": 1_700_000_000_000_000 + self.lsn, name: own_value(kind, key, row[0])}


def produce(config: dict, batches: list[tuple[str, list[tuple[bytes, bytes]]]]) -> None:
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    for topic, events in batches:
        for n, (key, value) in enumerate(events):
            producer.produce(topic, key=key, value=value, partition=0)
            if n % 5_000 == 0:
                producer.poll(0)
    assert producer.flush(120) == 0
