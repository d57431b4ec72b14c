"""issue 54.9: a bare payload's (schemas.enable=false) TIMESTAMP number is read as its connector
writes the column's default precision, guarded by its magnitude: never a plausible, wrong date."""

import json
from datetime import datetime

from pyspark.sql.types import StructType

from ingest.batch.formats.cdc import decode_envelope
from ingest.spec.model import Cdc

KAFKA = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
         "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
ROW = "id BIGINT, orderdate TIMESTAMP_NTZ"


def change(n: int, connector: str, orderdate) -> bytes:
    source = {"connector": connector, "lsn": n, "scn": str(n), "file": "mysql-bin.000003", "pos": n, "row": 0,
              "change_lsn": f"00000027:{n:08x}:0003"}
    return json.dumps({"before": None, "after": {"id": n, "orderdate": orderdate}, "op": "c", "ts_ms": 1,
                       "source": source}).encode()


def decoded(spark, *changes: bytes, **encodings: str) -> list:
    rows = [("t", 0, n, datetime(2026, 1, 1), str(n).encode(), value, None) for n, value in enumerate(changes)]
    cdc = Cdc(key=("id",), encodings=encodings)
    frame = decode_envelope(spark.createDataFrame(rows, KAFKA), cdc, StructType.fromDDL(ROW))
    return [(r["orderdate"], r["__reason"]) for r in frame.orderBy("__raw.offset").collect()]


def test_each_connector_default_precision_lands(spark):
    # Debezium's own example (distributed-caching): Postgres TIMESTAMP, orderdate 1548936781000000
    instant = datetime(2019, 1, 31, 12, 13, 1)
    got = decoded(spark, change(1, "postgresql", 1548936781000000), change(2, "oracle", 1548936781000000),
                  change(3, "sqlserver", 1548936781000000000), change(4, "mysql", 1548936781000))
    assert got == [(instant, None)] * 4


def test_a_magnitude_of_another_unit_is_a_dead_letter_saying_what_to_set(spark):
    got = decoded(spark, change(1, "postgresql", 1548936781000), change(2, "mysql", 1548936781000000))
    assert got[0] == (None, (
        "column orderdate: value '1548936781000' is not read as io.debezium.time.MicroTimestamp (microseconds "
        "since the epoch), the postgresql connector's default for a bare payload; its magnitude is that of "
        "io.debezium.time.Timestamp: set cdc.encodings.orderdate: io.debezium.time.Timestamp for the changes "
        "to come (those dead-lettered keep their bytes; `ingest replay` skips them)"))
    assert got[1] == (None, (
        "column orderdate: value '1548936781000000' is not read as io.debezium.time.Timestamp (milliseconds "
        "since the epoch), the mysql connector's default for a bare payload; its magnitude is that of "
        "io.debezium.time.MicroTimestamp: set "
        "cdc.encodings.orderdate: io.debezium.time.MicroTimestamp for the changes to come (those "
        "dead-lettered keep their bytes; `ingest replay` skips them)"))


def test_an_encoding_set_is_read_as_set(spark):
    got = decoded(spark, change(1, "postgresql", 1548936781000), orderdate="io.debezium.time.Timestamp")
    assert got == [(datetime(2019, 1, 31, 12, 13, 1), None)]
