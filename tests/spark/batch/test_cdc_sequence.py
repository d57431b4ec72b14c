"""Each connector's default order (issue 28.6): the position in its own log, packed in `_sequence`,
read from the envelopes as Debezium writes them; `ts_ms` only where no connector is known."""

from __future__ import annotations

import json

from pyspark.sql.types import StructType

from ingest.batch.formats.cdc import decode_envelope
from ingest.batch.staged import REASON
from ingest.spec.columns import SEQUENCE
from ingest.spec.model import Cdc

RAW = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
       "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")


def sequences(spark, sources: list[dict]) -> list[tuple]:
    values = [json.dumps({"before": None, "after": {"id": n}, "op": "c", "ts_ms": 1_700_000_000_000 - n,
                          "source": source}).encode() for n, source in enumerate(sources)]
    raw = spark.createDataFrame([("t", 0, n, None, None, v, []) for n, v in enumerate(values)], RAW)
    row = StructType.fromDDL("id BIGINT")
    changes = decode_envelope(raw, Cdc(key=("id",)), row).orderBy("id")
    return [(r[SEQUENCE], r[REASON]) for r in changes.collect()]


def test_each_connector_orders_by_its_own_position(spark):
    found = sequences(spark, [
        {"connector": "mysql", "file": "mysql-bin.000003", "pos": 1041, "row": 0},
        {"connector": "mysql", "file": "mysql-bin.000003", "pos": 1041, "row": 1},
        {"connector": "mysql", "file": "mysql-bin.000004", "pos": 4, "row": 0},
        {"connector": "sqlserver", "change_lsn": "00000027:00000758:0005",
         "commit_lsn": "00000027:00000758:0007"},
        {"connector": "sqlserver", "change_lsn": None, "commit_lsn": "00000025:00000d98:0001"},  # snapshot
        {"connector": "oracle", "scn": "2868546"},
        {"connector": "mongodb", "ts_ms": 1558965508000, "ord": 2},
        {"connector": "postgresql", "lsn": 24023128},
        {"connector": "mysql", "file": "mysql-bin.000003", "pos": 2 ** 31, "row": 0},  # does not fit
        {"connector": "someone-else"},
    ])
    assert found == [
        ((3 << 43) + (1041 << 12), None), ((3 << 43) + (1041 << 12) + 1, None), ((4 << 43) + (4 << 12), None),
        ((0x27 << 48) + (0x758 << 16) + 5, None), ((0x25 << 48) + (0xd98 << 16) + 1, None),
        (2868546, None), ((1558965508 << 32) + 2, None), (24023128, None),
        (None, "null sequence: the mysql connector's position (source.file (its number), source.pos, "
               "source.row) is missing or does not fit a BIGINT; name the order in cdc.sequence"),
        (1_700_000_000_000 - 9, None)]


def test_a_source_field_sequence_holding_text_is_a_decode_dead_letter(spark):
    """Issue 57 point 4: `cdc.sequence: source.lsn` cast under ANSI mode failed the whole batch
    (on every run) on a value that is not a whole number: an SQL Server hex LSN, "x", a number
    above BIGINT. Each is the change's `decode` dead letter; the good change beside them lands."""
    from ingest.batch.staged import STAGE

    lsns = [5, "x", "00000027:00000758:0005", "99999999999999999999"]
    values = [json.dumps({"before": None, "after": {"id": n}, "op": "c", "ts_ms": 1,
                          "source": {"connector": "postgresql", "lsn": lsn}}).encode()
              for n, lsn in enumerate(lsns)]
    raw = spark.createDataFrame([("t", 0, n, None, None, v, []) for n, v in enumerate(values)], RAW)
    changes = decode_envelope(raw, Cdc(key=("id",), sequence="source.lsn"), StructType.fromDDL("id BIGINT"))
    found = [(r.id, r[STAGE], r[SEQUENCE], r[REASON]) for r in changes.orderBy("id").collect()]
    why = "null sequence: source.lsn is missing or not a whole number"
    assert found == [(0, None, 5, None), (1, "decode", None, why), (2, "decode", None, why),
                     (3, "decode", None, why)]
