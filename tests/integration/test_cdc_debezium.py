"""Change events as Debezium wrote them (tests/data/debezium/), through the real broker, Spark and
Delta: Connect's logical types (decimals, instants, dates, times), re-sends, late events and
legacy tombstones. Each table must equal the source table computed here, independently, and
read the same with Spark and with delta-rs."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from ingest.spec.model import Cdc, Uid, frozen_map
from tests.integration.conftest import run_once as run_to_end
from tests.integration.conftest import table

CORPUS = Path(__file__).parent.parent / "data" / "debezium"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def logged_changes(name: str, prefix: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of each `<prefix>: <key> - <value>` log line, bytes as Debezium wrote them."""
    lines = (CORPUS / name).read_text().splitlines()
    assert lines[0].startswith("# source: github.com/debezium/")
    found = []
    for line in lines[1:]:
        if line.startswith(prefix + ": "):
            key, value = line[len(prefix) + 2:].split(" - ", 1)
            found.append((key.encode(), value.encode()))
    return found


def unscaled(value: Decimal, scale: int) -> str:
    """Connect's Decimal in JSON: base64 of the unscaled big-endian two's-complement integer."""
    number = int(value.scaleb(scale))
    return base64.b64encode(number.to_bytes(number.bit_length() // 8 + 1, "big", signed=True)).decode()


def from_unscaled(text: str, scale: int) -> Decimal:
    return Decimal(int.from_bytes(base64.b64decode(text), "big", signed=True)).scaleb(-scale)


def wrapped(after_fields: list[dict], payload: dict, table_name: str) -> bytes:
    """The JSON converter with schemas.enable=true: Debezium's envelope schema around `payload`."""
    row = {"type": "struct", "fields": after_fields, "optional": True,
           "name": f"dbserver1.inventory.{table_name}.Value"}
    schema = {"type": "struct", "name": f"dbserver1.inventory.{table_name}.Envelope", "optional": False,
              "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                         {"type": "struct", "optional": False, "field": "source",
                          "name": "io.debezium.connector.postgresql.Source",
                          "fields": [{"type": "int64", "optional": True, "field": "lsn"}]},
                         {"type": "string", "optional": False, "field": "op"},
                         {"type": "int64", "optional": True, "field": "ts_ms"}]}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def change(key: int, lsn: int, after: dict) -> dict:
    return {"before": None, "after": {"id": key, **after}, "op": "c", "ts_ms": 1610716847259,
            "source": {"connector": "postgresql", "lsn": lsn}}


def last_by_lsn(values: list[bytes]) -> dict[int, dict]:
    """The source table: each key's row after its last change in lsn order (the test's own
    reading of the envelopes, not ingest's)."""
    latest: dict[int, tuple[int, dict]] = {}
    for value in values:
        envelope = json.loads(value)
        envelope = envelope.get("payload", envelope)
        row = envelope["after"]
        lsn = envelope["source"]["lsn"]
        if row["id"] not in latest or latest[row["id"]][0] < lsn:
            latest[row["id"]] = (lsn, row)
    return {key: row for key, (_, row) in latest.items()}


def send(kafka, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = Producer(kafka.client_config())
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


@pytest.fixture
def cdc_of(pipeline):
    def build(schema: str, **encodings: str):
        return replace(pipeline, name="orders_cdc", source=replace(pipeline.source, schema=schema),
                       uid=Uid(field="id"), cdc=Cdc(key=("id",), encodings=frozen_map(encodings)),
                       target=replace(pipeline.target, mode="upsert"))
    return build


def landed(spark, pipeline, columns: str) -> list[tuple]:
    """The table's live rows, read with Spark and with delta-rs, which must agree. delta-rs
    through its SQL engine: a cdc target has deletion vectors, which its pyarrow reader refuses."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    names = columns.split(", ")
    by_spark = [tuple(r) for r in table(spark, pipeline.target.path).where("NOT _deleted")
                .orderBy("id").select(*names).collect()]
    arrow = pa.table(QueryBuilder().register("t", DeltaTable(pipeline.target.path))
                     .execute("SELECT * FROM t").read_all()).to_pylist()
    by_delta_rs = sorted((tuple(naive_utc(r[n]) for n in names) for r in arrow if not r["_deleted"]),
                         key=lambda r: r[0])
    assert by_delta_rs == by_spark
    return by_spark


def naive_utc(value):
    """delta-rs gives a TIMESTAMP as an aware UTC datetime, Spark (session in UTC) as naive."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def dead_reasons(spark, pipeline) -> list[str]:
    return [r.reason for r in table(spark, pipeline.dead_letter.path).orderBy("_offset").collect()]


ORDERLINE = "id BIGINT, item STRING, quantity INT, status STRING, totalprice DECIMAL(19,2), order_id BIGINT"
DECIMAL_FIELD = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                 "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "19"},
                 "field": "totalprice"}
VARIABLE_FIELD = {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
                  "version": 1, "fields": [{"type": "int32", "optional": False, "field": "scale"},
                                           {"type": "bytes", "optional": False, "field": "value"}],
                  "field": "totalprice"}
ID_FIELD = {"type": "int32", "optional": False, "field": "id"}


def test_postgres_decimals_resent_late_and_tombstoned_land_as_the_source_table(spark, kafka, topic, cdc_of):
    lines = logged_changes("postgres-orders.txt", "Received OL")  # 2 creates, then an update
    real = [value for _, value in lines]
    # constructed beside them (the corpus has no such values): Connect's Decimal in the schema'd
    # form, negative and large, VariableScaleDecimal, a null
    negative = wrapped([ID_FIELD, DECIMAL_FIELD], change(
        3, 40_000_000, {"totalprice": unscaled(Decimal("-0.01"), 2)}), "orderline")
    large = wrapped([ID_FIELD, DECIMAL_FIELD], change(
        4, 40_000_001, {"totalprice": unscaled(Decimal("-12345678901234567.89"), 2)}), "orderline")
    variable = wrapped([ID_FIELD, VARIABLE_FIELD], change(
        5, 40_000_002, {"totalprice": {"scale": 1, "value": unscaled(Decimal("123.4"), 1)}}), "orderline")
    null_price = json.dumps(change(6, 40_000_003, {"totalprice": None})).encode()
    # what the column cannot hold: a digit beyond its scale, and the string mode's text
    too_fine = wrapped([ID_FIELD, VARIABLE_FIELD], change(
        7, 40_000_004, {"totalprice": {"scale": 3, "value": unscaled(Decimal("12.345"), 3)}}), "orderline")
    as_text = json.dumps(change(8, 40_000_005, {"totalprice": "39.98"})).encode()
    legacy_tombstone = b'{"schema":null,"payload":null}'  # the JSON converter before KAFKA-3832
    # the update first, the creates late, then re-sent (as after a connector restart)
    records = [lines[2], lines[0], lines[1], lines[0], lines[2], (lines[2][0], legacy_tombstone),
               (b'{"id":3}', negative), (b'{"id":4}', large), (b'{"id":5}', variable),
               (b'{"id":6}', null_price), (b'{"id":7}', too_fine), (b'{"id":8}', as_text)]
    send(kafka, topic, records)
    pipeline = cdc_of(ORDERLINE)
    reports = run_to_end(spark, pipeline, timeout=900)

    source = last_by_lsn([*real, negative, large, variable, null_price])
    expected = []
    for key_id, row in sorted(source.items()):
        price = row.get("totalprice")
        if isinstance(price, dict):
            price = from_unscaled(price["value"], price["scale"])
        elif price is not None:
            price = from_unscaled(price, 2)
        expected.append((key_id, row.get("status"), None if price is None else price.quantize(Decimal("0.01"))))
    assert expected[:2] == [(1, "ENTERED", Decimal("39.98")), (2, "CANCELLED", Decimal("29.99"))]
    assert landed(spark, pipeline, "id, status, totalprice") == expected
    assert dead_reasons(spark, pipeline) == [
        "column totalprice: value '{\"scale\":3,\"value\":\"MDk=\"}' is not "
        "io.debezium.data.VariableScaleDecimal ({scale, value}) fitting decimal(19,2)",
        "column totalprice: value '39.98' is not org.apache.kafka.connect.data.Decimal (base64 of "
        "the unscaled two's-complement integer, scale 2, decimal.handling.mode=precise) fitting "
        "decimal(19,2)"]
    assert sum(r.summary.by_stage["filtered"] for r in reports) == 1  # the legacy tombstone


PURCHASEORDER = "id BIGINT, customerid BIGINT, orderdate TIMESTAMP, shipdate DATE, shiptime STRING"


def test_postgres_instants_dates_and_times_by_their_encoding(spark, kafka, topic, cdc_of):
    lines = logged_changes("postgres-orders.txt", "Received PO")
    fields = [ID_FIELD, {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp",
                         "version": 1, "field": "orderdate"},
              {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
               "field": "shipdate"},
              {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1,
               "field": "shiptime"}]
    # constructed: the message names millis (it wins over cdc.encodings), a date, a time of day
    named = wrapped(fields, change(2, 40_000_000, {"customerid": 7, "orderdate": 1548936781123,
                                                   "shipdate": 17927, "shiptime": 45181000001}),
                    "purchaseorder")
    zoned = json.dumps(change(3, 40_000_001, {"customerid": 8,
                                              "orderdate": "2019-01-31T12:13:01.5+01:00"})).encode()
    year_10000 = json.dumps(change(4, 40_000_002, {"customerid": 9,
                                                   "orderdate": 253402300800000000})).encode()
    send(kafka, topic, [*lines, (b'{"id":2}', named), (b'{"id":3}', zoned), (b'{"id":4}', year_10000)])
    pipeline = cdc_of(PURCHASEORDER, orderdate=MICRO_TIMESTAMP)
    run_to_end(spark, pipeline, timeout=900)

    first = json.loads(lines[0][1])["after"]
    assert landed(spark, pipeline, "id, customerid, orderdate, shipdate, shiptime") == [
        (1, 123, (EPOCH + timedelta(microseconds=first["orderdate"])).replace(tzinfo=None), None, None),
        (2, 7, (EPOCH + timedelta(milliseconds=1548936781123)).replace(tzinfo=None),
         date(1970, 1, 1) + timedelta(days=17927), "12:33:01.000001"),
        (3, 8, datetime(2019, 1, 31, 11, 13, 1, 500000), None, None)]
    assert dead_reasons(spark, pipeline) == [
        "column orderdate: value '253402300800000000' is outside years 1-9999 as "
        "io.debezium.time.MicroTimestamp (microseconds since the epoch)"]


CUSTOMERS = "id BIGINT, first_name STRING, last_name STRING, email STRING"


def mysql_position(source: dict) -> int:
    """MySQL's order, (binlog file number, pos, row), packed as docs/cdc.md says."""
    return (int(source["file"].rsplit(".", 1)[1]) << 43) + (source["pos"] << 12) + source["row"]


def test_mysql_history_orders_by_binlog_position_not_the_connector_clock(spark, kafka, topic, cdc_of):
    """#27.10: a MySQL change has no lsn; its clock ts_ms can go back (a task on a worker behind)
    and a restart re-sends with new ts_ms. The binlog position orders, and a re-send is no version."""
    prefix = "Received message for destination 'wasm.inventory.customers', with id"
    lines = (CORPUS / "mysql-customers.txt").read_text().splitlines()
    assert lines[0].startswith("# source: github.com/debezium/")
    snapshot, update = (line.split(" and content ", 1)[1].encode() for line in lines[1:]
                        if line.startswith(prefix))
    # constructed from the real update: a second update later in the binlog, its clock 2 s behind
    later = json.loads(update)
    later["before"], later["after"] = later["after"], {**later["after"], "first_name": "Sara"}
    later["source"]["pos"] += 300
    later["ts_ms"] -= 2000
    later = json.dumps(later).encode()

    def resent(value: bytes) -> bytes:  # after a connector restart: the same position, a new clock
        envelope = json.loads(value)
        envelope["ts_ms"] += 60_000
        return json.dumps(envelope).encode()

    send(kafka, topic, [(b'{"id":1004}', snapshot), (b'{"id":1001}', update), (b'{"id":1001}', later),
                        (b'{"id":1001}', resent(update)), (b'{"id":1001}', resent(later))])
    pipeline = cdc_of(CUSTOMERS)
    pipeline = replace(pipeline, target=replace(pipeline.target, history=True))
    run_to_end(spark, pipeline, timeout=900)

    versions = []
    for value in (update, later, snapshot):
        envelope = json.loads(value)
        versions.append((envelope["after"]["id"], envelope["after"]["first_name"],
                         mysql_position(envelope["source"])))
    versions.sort()
    expected = [(key, name, start, next((s for k, _, s in versions if k == key and s > start), None))
                for key, name, start in versions]
    found = table(spark, pipeline.target.path).orderBy("id", "_valid_from")
    assert [tuple(r) for r in found.select("id", "first_name", "_valid_from", "_valid_to").collect()] \
        == sorted(expected, key=lambda version: (version[0], version[2]))
    assert [r.first_name for r in found.where("_current").orderBy("id").collect()] == ["Sara", "Anne"]

    from delta.tables import DeltaTable

    from ingest.audit.verify_changes import verify_changes

    assert verify_changes(spark, pipeline).ok
    DeltaTable.forPath(spark, pipeline.target.path).update("id = 1001 AND _current", {"first_name": "'x'"})
    report = verify_changes(spark, pipeline)
    assert (report.ok, report.differing) == (False, 1)


def test_history_after_a_column_is_added_then_dropped(spark, kafka, topic, cdc_of):
    """#27.6: the SCD2 timeline unions the stored versions with the batch's; with a column added
    (add_columns) or a nullable one dropped, that union raised on every restart."""
    def create(key: int, lsn: int, row: dict) -> tuple[bytes, bytes]:
        return (json.dumps({"id": key}).encode(), json.dumps(change(key, lsn, row)).encode())

    v1 = cdc_of("id BIGINT, first_name STRING")
    v1 = replace(v1, target=replace(v1.target, history=True))
    send(kafka, topic, [create(1, 10, {"first_name": "Ann"})])
    run_to_end(spark, v1, timeout=900)
    v2 = replace(v1, source=replace(v1.source, schema="id BIGINT, first_name STRING, tier STRING"))
    send(kafka, topic, [create(1, 20, {"first_name": "Ann", "tier": "gold"})])
    run_to_end(spark, v2, timeout=900)
    v3 = replace(v1, source=replace(v1.source, schema="id BIGINT, tier STRING"))  # first_name dropped
    send(kafka, topic, [create(1, 30, {"tier": "silver"})])
    run_to_end(spark, v3, timeout=900)
    found = table(spark, v1.target.path).orderBy("_valid_from")
    assert [tuple(r) for r in found.select("first_name", "tier", "_valid_from", "_valid_to", "_current")
            .collect()] == [("Ann", None, 10, 20, False), ("Ann", "gold", 20, 30, False),
                            (None, "silver", 30, None, True)]


def documented_events(name: str) -> dict[str, tuple[bytes, dict]]:
    """Each `## <event>` listing of a documentation corpus: the bytes to send (the whole listing
    where it is JSON, else its `"payload": {...}` lines, the schemaless form) and the envelope."""
    text = (CORPUS / name).read_text()
    assert text.startswith("# source: github.com/debezium/")
    events = {}
    for block in text.split("\n## ")[1:]:
        title, listing = block.split("\n", 1)
        try:
            envelope = json.loads(listing)["payload"]
            value = listing
        except json.JSONDecodeError:  # the documentation elides the schema as { ... }
            lines = listing.splitlines()
            start = next(i for i, line in enumerate(lines) if line == '  "payload": {')
            end = next(i for i in range(start, len(lines)) if lines[i] == "  }")
            value = "\n".join(["{", *lines[start + 1:end], "}"])
            envelope = json.loads(value)
        events[title.split(":", 1)[0]] = (value.encode(), envelope)
    return events


def sqlserver_position(source: dict) -> tuple[str, str, int]:
    """SQL Server's own order, read here from the envelope: commit_lsn, then change_lsn, then
    event_serial_no (fixed-width hex LSNs compare as text; a snapshot's read has no change_lsn)."""
    return (source["commit_lsn"], source["change_lsn"] or "", int(source["event_serial_no"] or 0))


def test_sqlserver_snapshot_changes_resends_and_late_events_land_as_the_source_table(
        spark, kafka, topic, cdc_of):
    documented = documented_events("sqlserver-customers.txt")
    (create, created), (update, updated), (delete, deleted) = (
        documented[op] for op in ("create", "update", "delete"))

    def constructed(envelope: dict, row: dict, op: str, lsns: tuple[str | None, str, int | None]) -> bytes:
        change_lsn, commit_lsn, serial = lsns
        source = {**envelope["source"], "change_lsn": change_lsn, "commit_lsn": commit_lsn,
                  "event_serial_no": serial, "snapshot": "true" if op == "r" else "false"}
        return json.dumps({**envelope, "op": op, "before": None if op == "r" else envelope["after"],
                           "after": row, "source": source}).encode()

    # constructed beside the documented three (the documentation shows no row snapshot): a read of
    # another customer at the commit_lsn of the documentation's snapshot, and its later update
    sally = {"id": 1001, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    snapshot = constructed(created, sally, "r", (None, "00000025:00000d98:00a2", None))
    sally_moved = constructed(json.loads(snapshot), {**sally, "email": "sally@example.org"}, "u",
                              ("00000027:00000e10:0002", "00000027:00000e10:0004", 2))
    john, sally_key = b'{"id":1005}', b'{"id":1001}'
    # the update before its create (late), both re-sent after a restart, the delete and its
    # tombstone, then the create once more: an old event arriving after the row's delete
    records = [(sally_key, snapshot), (john, update), (john, create), (sally_key, sally_moved),
               (john, update), (john, create), (sally_key, snapshot), (john, delete), (john, None),
               (john, create)]
    send(kafka, topic, records)
    pipeline = cdc_of(CUSTOMERS)
    reports = run_to_end(spark, pipeline, timeout=900)

    rows: dict[int, tuple[tuple, dict | None]] = {}
    for value in (v for _, v in records if v is not None):
        envelope = json.loads(value)
        envelope = envelope.get("payload", envelope)
        row = envelope["before"] if envelope["op"] == "d" else envelope["after"]
        position = sqlserver_position(envelope["source"])
        if row["id"] not in rows or rows[row["id"]][0] < position:
            rows[row["id"]] = (position, None if envelope["op"] == "d" else envelope["after"])
    expected = [(r["id"], r["first_name"], r["last_name"], r["email"])
                for _, r in sorted(rows.values(), key=lambda v: v[1]["id"] if v[1] else 0) if r]
    assert expected == [(1001, "Sally", "Thomas", "sally@example.org")]
    assert deleted["before"]["email"] == updated["after"]["email"] == "noreply@example.org"
    assert landed(spark, pipeline, "id, first_name, last_name, email") == expected
    assert sum(r.summary.by_stage["filtered"] for r in reports) == 1  # the tombstone
    assert not Path(pipeline.dead_letter.path).exists()  # no dead letter written

    from delta.tables import DeltaTable

    from ingest.audit.verify_changes import verify_changes

    assert verify_changes(spark, pipeline).ok
    DeltaTable.forPath(spark, pipeline.target.path).update("id = 1001", {"email": "'x'"})
    report = verify_changes(spark, pipeline)
    assert (report.ok, report.differing) == (False, 1)


def avro_schemas() -> dict[str, dict]:
    """The envelope schemas Debezium's AvroConverter registers (built as the file's header says)."""
    text = (CORPUS / "postgres-orders-avro.txt").read_text()
    assert text.startswith("# source: ")
    return {title: json.loads(schema) for title, schema in
            (block.split("\n", 1) for block in text.split("\n## ")[1:])}


def as_avro_record(envelope: dict, decimals: tuple[str, ...] = ()) -> dict:
    """A JSON envelope's values as the AvroConverter holds them: a Decimal's base64 as its number."""
    def row(values: dict | None) -> dict | None:
        if values is None:
            return None
        return {k: from_unscaled(v, 2) if k in decimals and v is not None else v for k, v in values.items()}
    return {**envelope, "before": row(envelope["before"]), "after": row(envelope["after"])}


@pytest.mark.parametrize("table_name", ["orderline", "purchaseorder"])
def test_postgres_avro_lands_as_the_source_table(spark, kafka, topic, registry, cdc_of, table_name):
    """Debezium's Avro form: connect.name on plain longs and bytes (MicroTimestamp, Decimal with
    its scale) decides each column, as in the JSON form."""
    from tests.integration.test_avro import avro_pipeline, serialized

    prefix = "Received OL" if table_name == "orderline" else "Received PO"
    lines = logged_changes("postgres-orders.txt", prefix)
    schema = avro_schemas()[table_name]
    real = [json.loads(value) for _, value in lines]
    if table_name == "orderline":
        # constructed beside the real ones: negative decimals, a large one, a null
        extra = [change(3, 40_000_000, {"quantity": 1, "totalprice": unscaled(Decimal("-0.01"), 2)}),
                 change(4, 40_000_001, {"quantity": 1, "totalprice": unscaled(Decimal("-12345678901234567.89"), 2)}),
                 change(5, 40_000_002, {"quantity": 1, "totalprice": None})]
        columns, decimals = "id, status, totalprice", ("totalprice",)
    else:
        # constructed: an instant before the epoch, and one updated twice, its updates re-sent late
        extra = [change(2, 40_000_000, {"customerid": 7, "orderdate": -1}),
                 change(3, 40_000_001, {"customerid": 8, "orderdate": 1_700_000_000_123_456}),
                 {**change(3, 40_000_003, {"customerid": 8, "orderdate": 1_700_000_060_000_001}), "op": "u"}]
        columns, decimals = "id, customerid, orderdate", ()
    for envelope in extra:
        envelope["source"] = {**real[0]["source"], "lsn": envelope["source"]["lsn"]}
    events = [*real, *extra]
    sent = [*events, *events[::-1]]  # each re-sent, the later ones first
    send(kafka, topic, [(json.dumps({"id": e["after"]["id"]}).encode(),
                         serialized(registry, topic, schema, as_avro_record(e, decimals))) for e in sent])
    pipeline = avro_pipeline(cdc_of(None), registry)
    run_to_end(spark, pipeline, timeout=900)

    source = last_by_lsn([json.dumps(e).encode() for e in events])
    if table_name == "orderline":
        expected = [(key, row.get("status"), None if row["totalprice"] is None
                     else from_unscaled(row["totalprice"], 2)) for key, row in sorted(source.items())]
        assert [price for _, _, price in expected] == [
            Decimal("39.98"), Decimal("29.99"), Decimal("-0.01"), Decimal("-12345678901234567.89"), None]
    else:
        expected = [(key, row["customerid"], (EPOCH + timedelta(microseconds=row["orderdate"])).replace(tzinfo=None))
                    for key, row in sorted(source.items())]
        assert [when for _, _, when in expected] == [
            datetime(2019, 1, 31, 12, 13, 1), datetime(1969, 12, 31, 23, 59, 59, 999999),
            datetime(2023, 11, 14, 22, 14, 20, 1)]
    assert landed(spark, pipeline, columns) == expected
    assert not Path(pipeline.dead_letter.path).exists()


def test_sqlserver_composite_sequence_orders_by_commit_change_lsn_and_serial(spark, kafka, topic, cdc_of):
    """cdc.sequence as a list: SQL Server's (commit_lsn, change_lsn, event_serial_no) compared in
    turn, LSNs as their fixed-width hex text; a snapshot read has neither change_lsn nor serial
    (a missing later item sorts first). Two changes at one change_lsn differ by their serial: the
    higher wins though it arrives first, where the default order would take the later offset."""
    documented = documented_events("sqlserver-customers.txt")
    (create, created), (update, _), (delete, _) = (documented[op] for op in ("create", "update", "delete"))

    def at(row: dict, op: str, change_lsn: str | None, commit_lsn: str, serial: int | None) -> bytes:
        return json.dumps({**created, "op": op, "before": None, "after": row, "source": {
            **created["source"], "change_lsn": change_lsn, "commit_lsn": commit_lsn,
            "event_serial_no": serial}}).encode()

    sally = {"id": 1001, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
    snapshot = at(sally, "r", None, "00000025:00000d98:00a2", None)
    first = at({**sally, "email": "first@example.org"}, "u", "00000027:00000e10:0002", "00000027:00000e10:0004", 1)
    second = at({**sally, "email": "second@example.org"}, "u", "00000027:00000e10:0002", "00000027:00000e10:0004", 2)
    john, sally_key = b'{"id":1005}', b'{"id":1001}'
    records = [(sally_key, second), (sally_key, snapshot), (sally_key, first), (john, update), (john, create),
               (john, delete), (john, None), (john, create)]
    send(kafka, topic, records)
    pipeline = cdc_of(CUSTOMERS)
    order = ("source.commit_lsn", "source.change_lsn", "source.event_serial_no")
    pipeline = replace(pipeline, cdc=replace(pipeline.cdc, sequence=order))
    run_to_end(spark, pipeline, timeout=900)

    latest: dict[int, tuple[tuple, dict | None]] = {}
    for value in (v for _, v in records if v is not None):
        envelope = json.loads(value)
        envelope = envelope.get("payload", envelope)
        key = (envelope["before"] if envelope["op"] == "d" else envelope["after"])["id"]
        position = sqlserver_position(envelope["source"])
        if key not in latest or latest[key][0] < position:
            latest[key] = (position, None if envelope["op"] == "d" else envelope["after"])
    expected = [(r["id"], r["first_name"], r["last_name"], r["email"]) for _, r in latest.values() if r]
    assert expected == [(1001, "Sally", "Thomas", "second@example.org")]
    assert landed(spark, pipeline, "id, first_name, last_name, email") == expected
    assert not Path(pipeline.dead_letter.path).exists()

    from ingest.audit.verify_changes import verify_changes

    assert verify_changes(spark, pipeline).ok


def test_mysql_history_by_a_listed_binlog_position(spark, kafka, topic, cdc_of):
    """A composite cdc.sequence in history mode: _valid_from and _valid_to are structs of the
    items, and versions chain in (file, pos, row) order whatever order they arrive in."""
    prefix = "Received message for destination 'wasm.inventory.customers', with id"
    lines = (CORPUS / "mysql-customers.txt").read_text().splitlines()
    snapshot, update = (line.split(" and content ", 1)[1].encode() for line in lines[1:]
                        if line.startswith(prefix))
    later = json.loads(update)  # constructed: a second update further in the same binlog file
    later["before"], later["after"] = later["after"], {**later["after"], "first_name": "Sara"}
    later["source"]["pos"] += 300
    later = json.dumps(later).encode()
    send(kafka, topic, [(b'{"id":1004}', snapshot), (b'{"id":1001}', later), (b'{"id":1001}', update),
                        (b'{"id":1001}', later)])
    pipeline = cdc_of(CUSTOMERS)
    pipeline = replace(pipeline, cdc=replace(pipeline.cdc, sequence=("source.file", "source.pos", "source.row")),
                       target=replace(pipeline.target, history=True))
    run_to_end(spark, pipeline, timeout=900)

    def position(value: bytes) -> tuple:
        source = json.loads(value)["source"]
        return ((None, source["file"]), (source["pos"], str(source["pos"])), (source["row"], str(source["row"])))

    def plain(struct) -> tuple | None:
        return None if struct is None else tuple(tuple(item) for item in struct)

    found = table(spark, pipeline.target.path).orderBy("id", "_valid_from").collect()
    assert [(r.id, r.first_name, plain(r._valid_from), plain(r._valid_to), r._current) for r in found] == [
        (1001, "Sarah", position(update), position(later), False),
        (1001, "Sara", position(later), None, True),
        (1004, "Anne", position(snapshot), None, True)]

    from delta.tables import DeltaTable

    from ingest.audit.verify_changes import verify_changes

    assert verify_changes(spark, pipeline).ok
    DeltaTable.forPath(spark, pipeline.target.path).update("id = 1001 AND _current", {"first_name": "'x'"})
    assert verify_changes(spark, pipeline).differing == 1
