"""A whole database in one job: a pattern over a connector's table topics, a table per topic,
and no schema and no key in the YAML: each table's columns come from the Connect schema in its
messages, its key columns from the schema in its message keys.

The envelopes are the SQL Server connector's documented create event with its schema
(tests/data/debezium/sqlserver-customers.txt names its source), its payload varied per change;
the keys its documented key of the same table (tests/data/debezium/keys.txt), its payload varied
likewise; the decimal and instant fields added to one table are Connect's as Debezium writes them."""

from __future__ import annotations

import copy
import json
import re
import shutil
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from delta.tables import DeltaTable

from ingest.audit.per_table import verify_per_table
from ingest.cli import main
from ingest.kafka.local_broker import create_topic
from ingest.spec.loader import load_file
from ingest.stream.query import start_query
from tests.integration.conftest import crash_at, ingest_run, table
from tests.integration.processes import wait_for
from tests.integration.test_cdc_debezium import documented_events, unscaled

TABLES = 30
DOCUMENTED = json.loads(documented_events("sqlserver-customers.txt")["create"][0])
KEY = json.loads((Path(__file__).parents[1] / "data" / "debezium" / "keys.txt").read_text()
                 .split("\n## sqlserver customers: ")[1].split("\n", 1)[1].split("\n## ")[0])
TIER = {"type": "string", "optional": True, "field": "tier"}
PRICE = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": "2", "connect.decimal.precision": "19"}, "field": "totalprice"}
RATE = {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
        "fields": [{"type": "int32", "optional": False, "field": "scale"},
                   {"type": "bytes", "optional": False, "field": "value"}], "field": "rate"}
ORDERED = {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1,
           "field": "ordered"}


def schema_with(*extra: dict) -> dict:
    """The documented envelope schema, its row (before and after) with `extra` fields."""
    schema = copy.deepcopy(DOCUMENTED["schema"])
    for image in schema["fields"][:2]:
        image["fields"] += [dict(f) for f in extra]
    return schema


def lsn(n: int) -> str:
    return f"00000027:{n:08x}:0002"


def event(op: str, row: dict | None, before: dict | None, n: int, schema: dict | None = None,
          wrapped: bool = True) -> bytes:
    """A change at position `n` (its change_lsn and commit_lsn), as the connector wrote the documented one."""
    payload = {**DOCUMENTED["payload"], "op": op, "before": before, "after": row,
               "source": {**DOCUMENTED["payload"]["source"], "change_lsn": lsn(n), "commit_lsn": lsn(n),
                          "snapshot": "true" if op == "r" else "false"}}
    return json.dumps({"schema": schema or DOCUMENTED["schema"], "payload": payload} if wrapped
                      else payload).encode()


def key(n: int, schema: dict | None = None) -> bytes:
    """The documented key (its schema, a struct of the primary key's fields) of row `n`."""
    return json.dumps({"schema": schema or KEY["schema"], "payload": {"id": n}}).encode()


def person(key: int, name: str, **more) -> dict:
    return {"id": key, "first_name": name, "last_name": "Doe", "email": f"{name}@example.org", **more}


def changes(shaped: tuple = ()) -> list[tuple[bytes, bytes | None]]:
    """One table's changes, out of order: key 1's update before its snapshot read, key 2 created
    then deleted (and its tombstone), key 3 created. `shaped`: (extra field, its value) pairs."""
    schema = schema_with(*(f for f, _ in shaped)) if shaped else None
    values = {f["field"]: v for f, v in shaped}

    def row(key, name):
        return person(key, name, **values)
    return [(key(1), event("u", row(1, "ann2"), row(1, "ann"), 30, schema)),
            (key(1), event("r", row(1, "ann"), None, 10, schema)),
            (key(2), event("c", row(2, "bob"), None, 20, schema)),
            (key(2), event("d", None, row(2, "bob"), 40, schema)),
            (key(2), None),
            (key(3), event("c", row(3, "cy"), None, 50, schema))]


def send(kafka, topic: str, records) -> None:
    producer = Producer(kafka.client_config())
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def pipeline_file(folder: Path, name: str, pattern: str, **more) -> Path:
    """A whole-database pipeline: a pattern, a table per topic, cdc, and no schema nor key."""
    document = {
        "name": name,
        "source": {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", "pattern": pattern}, "format": "json"},
        "cdc": {"format": "debezium"},
        "target": {"path": str(folder / "tables" / "${topic}")},
        "checkpoint": str(folder / "checkpoints" / name),
        "dead_letter": {"path": str(folder / "dead_letter" / "${topic}")},
        **more,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def live(spark, path: str, columns: str = "id, first_name") -> list[tuple] | None:
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return [tuple(r) for r in table(spark, path).where("NOT _deleted").orderBy("id")
            .select(*columns.split(", ")).collect()]


def types(spark, path: str) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in table(spark, path).schema.fields}


def test_a_database_of_30_tables_without_a_schema_a_table_added_and_a_field_added(
        spark, kafka, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    prefix = f"db{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.dbo.t{n:02d}" for n in range(TABLES)]
    priced = topics[1]  # a table with a decimal and an instant column
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        send(kafka, topic, changes(((PRICE, unscaled(Decimal("39.98"), 2)), (ORDERED, 1548936781000123),
                                    (RATE, {"scale": 3, "value": unscaled(Decimal("-1.125"), 3)}))
                                   if topic == priced else ()))
    gone = f"{prefix}.dbo.gone"  # a table whose rows were all deleted, its topic compacted: tombstones only
    create_topic(kafka.client_config(), gone)
    send(kafka, gone, [(key(8), None), (key(9), None)])
    file = pipeline_file(tmp_path, "wholedb", rf"{prefix}\.dbo\..*",
                         trigger={"processing_time": "1 second"})
    loaded = load_file(file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    assert loaded.source.schema is None and loaded.columns_from_messages and loaded.key_from_messages
    path = {t: str(tmp_path / "tables" / t.replace(".", "_")) for t in [*topics, gone]}
    expected = [(1, "ann2"), (3, "cy")]

    query, _ = start_query(spark, loaded)
    try:
        query.processAllAvailable()
        late = f"{prefix}.dbo.t{TABLES:02d}"  # a table captured while the query runs
        create_topic(kafka.client_config(), late)
        send(kafka, late, changes())
        path[late] = str(tmp_path / "tables" / late.replace(".", "_"))
        grown = topics[5]  # a column added to one source table
        send(kafka, grown, [(key(4), event("c", person(4, "dee", tier="gold"), None, 60, schema_with(TIER)))])
        # the source finds the new topic at a later trigger: its table's first commit, then the rest
        wait_for(lambda: (Path(path[late]) / "_delta_log").exists(), 600, "the new topic's table")
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None

    for topic in [*topics, late]:
        assert live(spark, path[topic]) == (expected if topic != grown else [*expected, (4, "dee")]), topic
    assert live(spark, path[grown], "id, tier") == [(1, None), (3, None), (4, "gold")]
    assert types(spark, path[grown])["tier"] == "string"
    assert {k: v for k, v in types(spark, path[topics[0]]).items() if not k.startswith("_")} == {
        "id": "int", "first_name": "string", "last_name": "string", "email": "string"}
    assert types(spark, path[priced])["totalprice"] == "decimal(19,2)"
    assert types(spark, path[priced])["ordered"] == "timestamp"
    assert types(spark, path[priced])["rate"] == "string"
    assert (DeltaTable.forPath(spark, path[topics[0]]).detail().first().properties or {}).get(
        "ingest.cdc.key") == '["id"]'
    # tombstones alone: the table is made with the key's columns, and holds no row
    assert {k: v for k, v in types(spark, path[gone]).items() if not k.startswith("_")} == {"id": "int"}
    assert live(spark, path[gone], "id") == []
    assert live(spark, path[priced], "id, totalprice, ordered, rate") == [
        (1, Decimal("39.98"), datetime(2019, 1, 31, 12, 13, 1, 123), "-1.125"),
        (3, Decimal("39.98"), datetime(2019, 1, 31, 12, 13, 1, 123), "-1.125")]

    code = main(["plan", str(file)])
    shown = capsys.readouterr().out
    assert code == 0
    assert (f"{grown}: `id` INT, `first_name` STRING, `last_name` STRING, `email` STRING, `tier` STRING; "
            "key (id) from the message key's schema") in shown
    assert f"{priced}: `id` INT, `first_name` STRING, `last_name` STRING, `email` STRING, " \
           "`totalprice` DECIMAL(19,2), `ordered` TIMESTAMP, `rate` STRING" in shown



def test_a_crash_between_two_tables_then_a_lost_checkpoint_without_a_schema(spark, kafka, tmp_path, monkeypatch,
                                                                            capsys):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("INGEST_FAULT_CONFIRM", "crash")
    prefix = f"dbc{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}.dbo.{name}" for name in ("a", "b", "c")]
    for topic in topics:
        create_topic(kafka.client_config(), topic)
        send(kafka, topic, changes())
    bare = (b'{"id":9}', event("c", person(9, "nobody"), None, 5, wrapped=False))
    send(kafka, topics[2], [bare])  # schemas.enable=false on this one message: a dead letter
    file = pipeline_file(tmp_path, "crashdb", rf"{prefix}\.dbo\..*", table_threads=1)
    loaded = load_file(file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline
    path = {t: str(tmp_path / "tables" / t.replace(".", "_")) for t in topics}

    crash_at(spark, loaded, "between_tables")  # the first table has batch 0, the others not
    assert [live(spark, path[t]) is not None for t in topics] == [True, False, False]
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    shutil.rmtree(tmp_path / "checkpoints")
    for topic in topics:
        # keys without a schema (schemas.enable=false on the key converter): each table's key is
        # the one it recorded, read back by the run that starts from the Delta logs
        send(kafka, topic, [(b'{"id":5}', event("c", person(5, "eve"), None, 70))])
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    assert "resuming from the offsets recorded in the Delta log" in said
    for topic in topics:
        assert live(spark, path[topic]) == [(1, "ann2"), (3, "cy"), (5, "eve")], topic
    reasons = [r.reason for r in table(spark, str(tmp_path / "dead_letter" / topics[2].replace(".", "_")))
               .collect()]
    assert len(reasons) == 1 and reasons[0].startswith(f"no schema in the message: topic {topics[2]} ")
    audit = verify_per_table(spark, loaded)
    assert [(t.topics, t.report.ok) for t in audit.tables] == [((t,), True) for t in topics]
    DeltaTable.forPath(spark, path[topics[0]]).update("id = 3", {"first_name": "'x'"})
    audit = verify_per_table(spark, loaded)
    assert [t.topics for t in audit.tables if not t.report.ok] == [(topics[0],)]
    DeltaTable.forPath(spark, path[topics[0]]).update("id = 3", {"first_name": "'cy'"})

    # a field's type changed at the source: refused, naming the topic, the field and both types
    retyped = schema_with()
    for image in retyped["fields"][:2]:
        next(f for f in image["fields"] if f["field"] == "first_name")["type"] = "int64"
    send(kafka, topics[1], [(b'{"id":6}', event("c", {**person(6, "x"), "first_name": 6}, None, 80, retyped))])
    code, said = ingest_run(file, capsys)
    assert code == 1
    assert (f"topic {topics[1]}: field first_name is bigint in a message's schema and string in the table"
            in said), said[-3000:]
    assert live(spark, path[topics[1]]) == [(1, "ann2"), (3, "cy"), (5, "eve")]


@pytest.mark.parametrize("records", [[(b'{"id":1}', event("c", person(1, "a"), None, 5, wrapped=False))]],
                         ids=["bare"])
def test_a_new_table_whose_messages_carry_no_schema_stops_the_run_naming_the_topic(
        spark, kafka, tmp_path, monkeypatch, capsys, records):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    prefix = f"dbn{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.dbo.bare"
    create_topic(kafka.client_config(), topic)
    send(kafka, topic, records)
    file = pipeline_file(tmp_path, "baredb", rf"{prefix}\.dbo\..*")
    code, said = ingest_run(file, capsys)
    assert code != 0
    assert f"topic {topic}: its columns come from its messages" in said, said[-3000:]
    assert not (tmp_path / "tables").exists()


def test_one_topic_into_one_table_without_a_schema(spark, kafka, tmp_path, monkeypatch, capsys):
    """No `${topic}`: the single-table path derives the columns itself, batch by batch."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    topic = f"one{uuid.uuid4().hex[:6]}.dbo.customers"
    create_topic(kafka.client_config(), topic)
    send(kafka, topic, changes())
    file = pipeline_file(tmp_path, "onedb", re.escape(topic), target={"path": str(tmp_path / "tables" / "one")},
                         dead_letter={"path": str(tmp_path / "dead_letter" / "one")})
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    send(kafka, topic, [(key(4), event("c", person(4, "dee", tier="gold"), None, 60, schema_with(TIER)))])
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    assert live(spark, str(tmp_path / "tables" / "one"), "id, first_name, tier") == [
        (1, "ann2", None), (3, "cy", None), (4, "dee", "gold")]

    # the source table's key changed (another primary key): refused, naming the topic and both keys
    wider = {**KEY["schema"], "fields": [*KEY["schema"]["fields"],
                                         {"type": "string", "optional": False, "field": "email"}]}
    send(kafka, topic, [(key(7, wider), event("c", person(7, "gil"), None, 90))])
    code, said = ingest_run(file, capsys)
    assert code == 1
    assert (f"topic {topic}: the message key's schema names [id, email], the table's key is [id]; a table's "
            "key may not change") in said, said[-3000:]
    assert live(spark, str(tmp_path / "tables" / "one")) == [(1, "ann2"), (3, "cy"), (4, "dee")]


def test_a_transform_over_the_columns_from_the_messages(spark, kafka, tmp_path, monkeypatch, capsys):
    """The table holds the transform's output: the next batch's row is its messages' alone."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    topic = f"tx{uuid.uuid4().hex[:6]}.dbo.customers"
    create_topic(kafka.client_config(), topic)
    send(kafka, topic, changes())
    file = pipeline_file(tmp_path, "txdb", re.escape(topic), target={"path": str(tmp_path / "tables" / "one")},
                         dead_letter={"path": str(tmp_path / "dead_letter" / "one")},
                         transform={"select": ["*", "upper(first_name) AS shout"]})
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    send(kafka, topic, [(key(4), event("c", person(4, "dee", tier="gold"), None, 60, schema_with(TIER)))])
    code, said = ingest_run(file, capsys)
    assert code == 0, said[-3000:]
    assert live(spark, str(tmp_path / "tables" / "one"), "id, first_name, shout") == [
        (1, "ann2", "ANN2"), (3, "cy", "CY"), (4, "dee", "DEE")]
