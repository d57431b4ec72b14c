"""Every Kafka Connect and Debezium time encoding against a decode written here with Python
integers (issue 57 point 3): epoch nanoseconds exceed 2^53, so any step through DOUBLE is
off by a unit for some values (1704067200000000999 ns came out 1 us late)."""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timedelta

from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingest.batch.formats.cdc import decode_envelope
from ingest.batch.staged import REASON
from ingest.spec.model import Cdc

KAFKA = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
         "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
CONNECT, TIME = "org.apache.kafka.connect.data.", "io.debezium.time."
EPOCH = datetime(1970, 1, 1)
FIRST, LAST = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)
DAY_US = 86_400_000_000

# encoding -> its unit as (multiplier to microseconds, divisor to microseconds)
INSTANTS = {CONNECT + "Timestamp": (1_000, 1), TIME + "Timestamp": (1_000, 1),
            TIME + "MicroTimestamp": (1, 1), TIME + "NanoTimestamp": (1, 1_000)}
TIMES = {CONNECT + "Time": (1_000, 1), TIME + "Time": (1_000, 1), TIME + "MicroTime": (1, 1),
         TIME + "NanoTime": (1, 1_000)}
DATES = (CONNECT + "Date", TIME + "Date")


def micros(value: int, unit: tuple[int, int]) -> int:
    multiplier, divisor = unit
    return value * multiplier // divisor  # Python's // floors: nanoseconds truncated towards the past


def instant_values(rng: random.Random, unit: tuple[int, int]) -> list[int]:
    multiplier, divisor = unit  # integers only: a float of epoch microseconds is not exact
    first_us, last_us = (FIRST - EPOCH) // timedelta(microseconds=1), (LAST - EPOCH) // timedelta(microseconds=1)
    low = max(-(2 ** 63), -((-first_us * divisor) // multiplier))
    high = min(2 ** 63 - 1, (last_us * divisor + divisor - 1) // multiplier)
    per_day = DAY_US * divisor // multiplier
    edges = [0, 1, -1, low, high] + ([1_704_067_200_000_000_999, -1_704_067_200_000_000_999] if divisor > 1 else [])
    # the last unit of a day, the first of the next, around midnight of random days
    for _ in range(20):
        day = rng.randrange(low // per_day + 1, high // per_day)
        edges += [day * per_day + d for d in (-1, 0, 1)]
    return [v for v in edges + [rng.randrange(low, high) for _ in range(200)] if low <= v <= high]


def change(n: int, column: str, value: int) -> bytes:
    return json.dumps({"before": None, "after": {"id": n, column: value}, "op": "c", "ts_ms": 1,
                       "source": {"connector": "postgresql", "lsn": n}}).encode()


def decoded(spark, columns: dict[str, tuple[str, str]], values: dict[str, list[int]]) -> dict[int, object]:
    """columns: name -> (declared type, encoding); one change per value; id -> row."""
    rows, expected_columns, n = [], {}, 0
    for column, found in values.items():
        for value in found:
            rows.append(("t", 0, n, datetime(2026, 1, 1), None, change(n, column, value), []))
            expected_columns[n] = (column, value)
            n += 1
    raw = spark.createDataFrame(rows, KAFKA)
    row = StructType.fromDDL("id BIGINT, " + ", ".join(f"{c} {t}" for c, (t, _) in columns.items()))
    cdc = Cdc(key=("id",), encodings={c: e for c, (_, e) in columns.items()})
    changes = decode_envelope(raw, cdc, row)
    shown = [F.unix_micros(c).alias(c) if t == "TIMESTAMP" else F.col(c) for c, (t, _) in columns.items()]
    return {r.id: (expected_columns[r.id], r) for r in changes.select("id", REASON, *shown).collect()}


def test_every_instant_encoding_decodes_as_python_integers_do(spark):
    rng = random.Random(57)
    columns, values = {}, {}
    for i, (encoding, unit) in enumerate(INSTANTS.items()):
        found = instant_values(rng, unit)
        columns[f"at{i}"], values[f"at{i}"] = ("TIMESTAMP", encoding), found
        columns[f"local{i}"], values[f"local{i}"] = ("TIMESTAMP_NTZ", encoding), found
    wrong = []
    for (column, value), row in decoded(spark, columns, values).values():
        us = micros(value, INSTANTS[columns[column][1]])
        want = us if columns[column][0] == "TIMESTAMP" else EPOCH + timedelta(microseconds=us)
        if row[REASON] is not None or row[column] != want:
            wrong.append((column, columns[column][1], value, row[column], want, row[REASON]))
    assert not wrong, f"{len(wrong)} wrong, e.g. {wrong[:5]}"


def test_the_nanosecond_of_a_whole_microsecond_is_truncated(spark):
    columns = {"at": ("TIMESTAMP", TIME + "NanoTimestamp"), "local": ("TIMESTAMP_NTZ", TIME + "NanoTimestamp")}
    found = decoded(spark, columns, {"at": [1_704_067_200_000_000_999], "local": [1_704_067_200_000_000_999]})
    got = {column: row[column] for (column, _), row in found.values()}
    assert got == {"at": 1_704_067_200_000_000, "local": datetime(2024, 1, 1)}


def test_every_time_of_day_and_date_encoding_decodes_as_python_integers_do(spark):
    rng = random.Random(570)
    columns, values = {}, {}
    for i, (encoding, (multiplier, divisor)) in enumerate(TIMES.items()):
        per_day = DAY_US * divisor // multiplier
        columns[f"clock{i}"] = ("STRING", encoding)
        values[f"clock{i}"] = [0, 1, per_day - 1, per_day] + [rng.randrange(0, per_day) for _ in range(100)]
    for i, encoding in enumerate(DATES):
        columns[f"day{i}"] = ("DATE", encoding)
        values[f"day{i}"] = [-719_162, 2_932_896, 0, -1] + [rng.randrange(-719_162, 2_932_897) for _ in range(100)]
    wrong = []
    for (column, value), row in decoded(spark, columns, values).values():
        if columns[column][0] == "DATE":
            want: object = date(1970, 1, 1) + timedelta(days=value)
        else:
            us = micros(value, TIMES[columns[column][1]])
            seconds, fraction = divmod(us, 1_000_000)
            want = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"
        if row[REASON] is not None or row[column] != want:
            wrong.append((column, columns[column][1], value, row[column], want, row[REASON]))
    assert not wrong, f"{len(wrong)} wrong, e.g. {wrong[:5]}"
