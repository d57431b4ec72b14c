"""What a batch of change events costs to plan does not grow with copies of its parts (#33).

Spark analyzes and optimizes a batch's plan again for every batch. Written as one expression,
each Connect type's conversion copied its parts wherever they were used (a decimal's digits 32
times over): a row of a DECIMAL, a TIMESTAMP and a DATE column decoded to a plan of 720,000
characters, and building it took thousands of calls into the JVM, again for every batch.
"""

import json
import threading
from datetime import datetime
from decimal import Decimal

from py4j.clientserver import ClientServerConnection
from py4j.protocol import MEMORY_COMMAND_NAME

from ingest.batch.formats.cdc import decode_envelope
from ingest.spec.model import Cdc

ROW = ("id BIGINT, price DECIMAL(10,2), amount DECIMAL(38,10), at TIMESTAMP, local_at TIMESTAMP_NTZ, "
       "day DATE, opens STRING, name STRING")
KAFKA = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
         "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")


def change(n: int) -> bytes:
    row = {"id": n, "price": "D54=", "amount": {"scale": 2, "value": "D54="}, "at": 1_700_000_000_000_000,
           "local_at": 1_700_000_000_000, "day": 19_000, "opens": 32_400_000_000, "name": f"n{n}"}
    return json.dumps({"before": None, "after": row, "op": "c", "ts_ms": 1,
                       "source": {"connector": "postgresql", "lsn": n}}).encode()


def batch(spark, first: int):
    return spark.createDataFrame([("t", 0, n, datetime(2026, 1, 1), str(n).encode(), change(n), None)
                                  for n in range(first, first + 3)], KAFKA)


def calls_into_the_jvm(work) -> tuple[int, object]:
    """The calls `work` makes through py4j from this thread: not another thread's, nor py4j's
    releases of garbage-collected proxies (which any collection sends, in a long test session)."""
    count = [0]
    send, caller = ClientServerConnection.send_command, threading.current_thread()

    def counted(self, command):
        if threading.current_thread() is caller and not command.startswith(MEMORY_COMMAND_NAME):
            count[0] += 1
        return send(self, command)

    ClientServerConnection.send_command = counted
    try:
        result = work()
    finally:
        ClientServerConnection.send_command = send
    return count[0], result


def test_a_change_row_of_every_encoding_plans_small_and_is_built_once_per_run(spark):
    from pyspark.sql.types import StructType

    row = StructType.fromDDL(ROW)
    cdc = Cdc(key=("id",), encodings={"amount": "io.debezium.data.VariableScaleDecimal",
                                      "at": "io.debezium.time.MicroTimestamp",
                                      "local_at": "io.debezium.time.Timestamp",
                                      "opens": "io.debezium.time.MicroTime"})
    first = decode_envelope(batch(spark, 0), cdc, row)
    plan = first._jdf.queryExecution().analyzed().toString()
    assert len(plan) < 40_000, f"the decoded batch's plan is {len(plan):,} characters"

    next_batch = batch(spark, 3)
    calls, second = calls_into_the_jvm(lambda: decode_envelope(next_batch, cdc, row))
    assert calls < 1_000, f"the second batch's decode made {calls} calls into the JVM"
    decoded = {r.id: r for r in second.collect()}
    assert sorted(decoded) == [3, 4, 5] and {r["__stage"] for r in decoded.values()} == {None}
    got = decoded[4]
    assert (got.price, got.amount, got.day.isoformat(), got.opens, got._sequence) == (
        Decimal("39.98"), Decimal("39.98"), "2022-01-08", "09:00:00.000000", 4)
    assert got.local_at == datetime(2023, 11, 14, 22, 13, 20)
