"""The exactly-once proof over the whole matrix of pipeline kinds (#27).

Each feature was proven alone; here every kind of pipeline goes through the same
proof, so a new kind cannot join without passing it: insert_only, upsert,
tombstones by key, cdc with soft deletes, hard deletes and history, each with one
table and with a table per topic (a pattern, `${topic}` in target.path), JSON, and
Avro through the registry stand-in for insert_only and cdc; and cdc with no schema in the
YAML, its columns from Debezium's {schema, payload} messages, a table per topic (the
whole-database shape: one cell, the rest of cdc is proven above). Per cell:

- a crash at every batch fault point on a later batch (the run's batch 1; with a
  table per topic, between_tables and after_target_commit: its tables each go
  through the single-table path the one-table cell crashed at every point): the
  point raises in this process (`faults.raising`), which leaves the durable state
  a SIGKILL leaves there (the argument is in ingest/batch/commit/faults.py; during_merge
  needs a real kill and stays in test_crash_harness.py and test_cdc_crash.py);
- a run after them: the batch replayed with the checkpoint behind the Delta log;
- a crash between the two commits (after_target_commit), the checkpoint deleted,
  then a run: recovery from the Delta logs;
- the table equal to the one computed here from what was produced (no loss, no
  duplicate, every bad record once in the dead letters); `ingest replay` of
  everything changes nothing (single table: replay refuses a per-topic target);
- verify OK through the command (ingest.cli.main), and `ingest.verify` once per audit
  (a table per topic goes through both in test_verify_cdc.py), then one tampering of
  the table that the command must report (both go through ingest/audit/dispatch.py;
  test_verify_cdc.py tampers through both).

Cheap by design: in-process on the shared session and broker, tens of records,
one batch per run.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml
from confluent_kafka import Producer
from delta.tables import DeltaTable

import ingest
from ingest import cli
from ingest.batch.commit import faults
from ingest.kafka.local_broker import create_topic
from ingest.spec import template
from ingest.spec.loader import load_file
from tests.integration.conftest import REGISTRY_PASSWORD, REGISTRY_USER, crash_at, run_recovering, table

BAD = "bad"  # a payload that does not decode: malformed JSON, or Avro under an unknown schema id
JSON_BAD, AVRO_BAD = b'{"oops', b"\x00\x00\x00\x00\x63junk"


@dataclass(frozen=True)
class Record:
    payload: dict | str | None  # None: a tombstone; BAD: a record that does not decode
    partition: int = 0
    uid: str | None = None  # the message-id header
    key: str | None = None  # the Kafka key, as text


# --- the kinds: a spec, a workload of four phases, the table it must end as, a tampering ------


class Kind:
    name = ""
    avro_schema: dict | None = None  # the value's Avro schema, for the Avro cells
    deletes_log = False

    def spec(self) -> dict:
        raise NotImplementedError

    def phases(self, tag: str) -> list[list[Record]]:
        raise NotImplementedError

    def expected(self, records: list[Record]) -> list[tuple]:
        raise NotImplementedError

    def observed(self, spark, path: str) -> list[tuple]:
        raise NotImplementedError

    def tamper(self, spark, path: str) -> None:
        raise NotImplementedError

    def wire(self, payload: dict) -> dict:
        """What a record's JSON value holds: the payload, or a wrapper around it."""
        return payload

    def wire_key(self, key: str) -> str:
        """What a record's Kafka key holds: the key, or a wrapper around it."""
        return key


def rows(spark, path: str, *columns: str) -> list[tuple]:
    return sorted((tuple(r) for r in table(spark, path).select(*columns).collect()), key=repr)


def keyed(pairs) -> list[tuple]:
    return sorted(((uid, *values) for uid, values in pairs), key=repr)


class InsertOnly(Kind):
    """Orders by the message-id header; re-sends under new offsets; bad records."""
    name = "insert_only"
    avro_schema = {"type": "record", "name": "Order", "namespace": "shop",
                   "fields": [{"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"}]}

    def spec(self) -> dict:
        return {"source": {"schema": "order_id STRING NOT NULL, amount DOUBLE"},
                "uid": {"header": "message-id"}, "target": {}}

    def phases(self, tag: str) -> list[list[Record]]:
        def order(i: int, partition: int | None = None) -> Record:
            return Record({"order_id": f"o{i}", "amount": i * 1.5},
                          i % 2 if partition is None else partition, uid=f"{tag}-{i}")
        bad = [Record(BAD, 1, uid=f"{tag}-bad-{n}") for n in range(2)]
        return [[*(order(i) for i in range(1, 7)), bad[0]],
                [order(7), order(8), order(9), order(2, partition=1)],  # 2 again, on the other partition
                [order(10), order(11), order(7)],
                [order(12), order(1, partition=1), bad[1]]]

    def expected(self, records):
        return keyed({r.uid: (r.payload["order_id"], r.payload["amount"])
                      for r in records if isinstance(r.payload, dict)}.items())

    def observed(self, spark, path):
        return rows(spark, path, "_uid", "order_id", "amount")

    def tamper(self, spark, path):
        DeltaTable.forPath(spark, path).delete("order_id = 'o3'")  # a missing uid


class Upsert(Kind):
    """The latest version of each uid by `v`, late versions arriving after newer ones."""
    name = "upsert"

    def spec(self) -> dict:
        return {"source": {"schema": "name STRING, v BIGINT"}, "uid": {"header": "message-id"},
                "target": {"mode": "upsert", "order_by": "v"}}

    def phases(self, tag: str) -> list[list[Record]]:
        def version(n: int, v: int, partition: int = 0) -> Record:
            return Record({"name": f"u{n}v{v}", "v": v}, partition, uid=f"{tag}-u{n}")
        return [[version(1, 1), version(2, 1, 1), version(3, 1), Record(BAD, 1, uid=f"{tag}-bad-0")],
                [version(1, 2, 1), version(2, 3), version(2, 2, 1), version(3, 1, 1)],  # 2: late; 3: re-sent
                [version(4, 1), version(1, 3)],
                [version(1, 1, 1), version(4, 2), Record(BAD, 0, uid=f"{tag}-bad-1")]]

    def expected(self, records):
        latest: dict[str, dict] = {}
        for r in records:
            if isinstance(r.payload, dict) and (r.uid not in latest or r.payload["v"] > latest[r.uid]["v"]):
                latest[r.uid] = r.payload
        return keyed((uid, (p["name"], p["v"])) for uid, p in latest.items())

    def observed(self, spark, path):
        return rows(spark, path, "_uid", "name", "v")

    def tamper(self, spark, path):
        target = DeltaTable.forPath(spark, path).toDF()
        target.where("name = 'u4v2'").write.format("delta").mode("append").save(path)  # a duplicate uid


class Tombstones(Kind):
    """Upsert by Kafka key; a null value deletes the key (soft): a tombstone of a key never seen,
    a late older version after a tombstone (stays deleted), a newer one (brings the key back)."""
    name = "tombstones"

    def spec(self) -> dict:
        return {"source": {"schema": "name STRING, v BIGINT"}, "uid": {"key": True},
                "target": {"mode": "upsert", "order_by": "v", "deletes": "soft"}}

    def phases(self, tag: str) -> list[list[Record]]:
        def version(key: str, v: int) -> Record:
            return Record({"name": f"{key}v{v}", "v": v}, int(key[1:]) % 2, key=key)

        def tombstone(key: str) -> Record:
            return Record(None, int(key[1:]) % 2, key=key)
        return [[version("k1", 1), version("k2", 1), version("k3", 1), tombstone("k9"), Record(BAD, 1, key="k5")],
                [version("k1", 2), tombstone("k2"), version("k3", 1)],  # k3 re-sent
                [version("k2", 0), version("k4", 1)],  # k2 older than what its tombstone deleted
                [version("k2", 5), tombstone("k4")]]

    def expected(self, records):
        state: dict[str, tuple] = {}  # key -> (name, v, deleted)
        for r in records:
            if r.payload == BAD:
                continue
            name, v, deleted = state.get(r.key, (None, None, False))
            if r.payload is None:
                state[r.key] = (name, v, True)
            elif v is None or r.payload["v"] > v or (r.payload["v"] == v and not deleted):
                state[r.key] = (r.payload["name"], r.payload["v"], False)
        return keyed(state.items())

    def observed(self, spark, path):
        return rows(spark, path, "_uid", "name", "v", "_deleted")

    def tamper(self, spark, path):
        DeltaTable.forPath(spark, path).delete("_uid = 'k1'")


CDC_ROW = "id BIGINT, name STRING, tier STRING"


class Changes(Kind):
    """Debezium change events of a customers table: out-of-order changes, deletes, a key
    deleted and created again, a re-sent change, Debezium's tombstone, bad envelopes."""
    name = "cdc"
    deletes = "soft"
    history = False

    @property
    def avro_schema(self):  # type: ignore[override]
        from tests.integration.test_cdc import DEBEZIUM_AVRO

        return DEBEZIUM_AVRO

    def spec(self) -> dict:
        return {"source": {"schema": CDC_ROW}, "cdc": {"key": ["id"]},
                "target": {"deletes": self.deletes, **({"history": True} if self.history else {})}}

    def phases(self, tag: str) -> list[list[Record]]:
        images: dict[int, dict] = {}

        def change(op: str, key: int, lsn: int) -> Record:
            image = {"id": key, "name": f"n{key}", "tier": f"t{lsn}"}
            before = images.get(key) if op == "d" else None
            images[key] = image
            return Record({"before": before if op == "d" else None, "after": None if op == "d" else image,
                           "source": {"connector": "postgresql", "ts_ms": 1, "lsn": lsn}, "op": op,
                           "ts_ms": 1_700_000_000_000 + lsn}, key % 2, key=json.dumps({"id": key}))

        def late(key: int, lsn: int) -> Record:  # a change older than the key's last one, sent after it
            image = {"id": key, "name": f"n{key}", "tier": f"t{lsn}"}
            return Record({"before": None, "after": image, "source": {"connector": "postgresql", "ts_ms": 1,
                                                                      "lsn": lsn},
                           "op": "u", "ts_ms": 1_700_000_000_000 + lsn}, key % 2, key=json.dumps({"id": key}))
        first = [change("c", 1, 1), change("c", 2, 2), change("c", 3, 3), change("c", 4, 4),
                 Record(BAD, 1, key=json.dumps({"id": 9}))]
        second = [change("u", 1, 5), change("d", 2, 6), Record(None, 0, key=json.dumps({"id": 2})),
                  change("u", 3, 8), late(3, 7)]
        third = [change("c", 5, 9), change("u", 1, 10), change("d", 4, 11)]
        resent = third[1]
        fourth = [change("c", 2, 12), change("u", 5, 13), resent, Record(BAD, 0, key=json.dumps({"id": 8}))]
        return [first, second, third, fourth]

    @staticmethod
    def versions(records) -> dict[str, dict[int, dict]]:
        """Every change of each key, by sequence (a re-sent change is the same version)."""
        by_key: dict[str, dict[int, dict]] = {}
        for r in records:
            if isinstance(r.payload, dict):
                key = str(json.loads(r.key)["id"])
                by_key.setdefault(key, {})[r.payload["source"]["lsn"]] = r.payload
        return by_key

    def expected(self, records):
        last = {key: (lsn, changes[lsn]) for key, changes in self.versions(records).items()
                for lsn in [max(changes)]}
        image = {key: c["after"] or c["before"] for key, (_, c) in last.items()}
        return keyed((key, (image[key]["name"], image[key]["tier"], c["op"] == "d", lsn))
                     for key, (lsn, c) in last.items())

    def observed(self, spark, path):
        return rows(spark, path, "_uid", "name", "tier", "_deleted", "_sequence")

    def tamper(self, spark, path):
        DeltaTable.forPath(spark, path).update("_deleted", {"_deleted": "false"})  # a deleted key back


class HardDeletes(Changes):
    name = "cdc_hard"
    deletes = "hard"
    deletes_log = True

    def expected(self, records):
        live = [row for row in super().expected(records) if not row[3]]
        deleted = {key: max(lsn for lsn, c in changes.items() if c["op"] == "d")
                   for key, changes in self.versions(records).items()
                   if any(c["op"] == "d" for c in changes.values())}
        return [(row[0], row[1], row[2], row[4]) for row in live] + [("deletes", *sorted(deleted.items()))]

    def observed(self, spark, path):
        deleted = sorted(rows(spark, path + "_deletes", "_uid", "_sequence"))
        return rows(spark, path, "_uid", "name", "tier", "_sequence") + [("deletes", *deleted)]

    def tamper(self, spark, path):
        DeltaTable.forPath(spark, path).update("_uid = '1'", {"tier": "'tampered'"})


class History(Changes):
    name = "cdc_history"
    history = True

    def expected(self, records):
        found = []
        for key, changes in self.versions(records).items():
            sequences = sorted(changes)
            for n, lsn in enumerate(sequences):
                change = changes[lsn]
                deleted = change["op"] == "d"
                following = sequences[n + 1] if n + 1 < len(sequences) else None
                values = (None, None) if deleted else (change["after"]["name"], change["after"]["tier"])
                found.append((key, lsn, following, following is None and not deleted, deleted, *values))
        return sorted(found, key=repr)

    def observed(self, spark, path):
        return sorted(((r[0], r[1], r[2], r[3], r[4], *((None, None) if r[4] else (r[5], r[6])))
                       for r in table(spark, path).select("_uid", "_valid_from", "_valid_to", "_current",
                                                          "_deleted", "name", "tier").collect()), key=repr)

    def tamper(self, spark, path):
        DeltaTable.forPath(spark, path).update("_current AND _uid = '1'", {"tier": "'tampered'"})


class ChangesWithTheirSchema(Changes):
    """The cdc kind with no schema and no key in the YAML: each value and each key is Debezium's
    {schema, payload} (schemas.enable=true); the table takes its columns from the values' schema
    and its key from the keys' schema."""
    name = "cdc_messages"

    def spec(self) -> dict:
        spec = super().spec()
        return {**spec, "source": {}, "cdc": {k: v for k, v in spec["cdc"].items() if k != "key"}}

    def wire_key(self, key: str) -> str:
        schema = {"type": "struct", "optional": False, "name": "db.public.customers.Key",
                  "fields": [{"type": "int64", "optional": False, "field": "id"}]}
        return json.dumps({"schema": schema, "payload": json.loads(key)})

    def wire(self, payload: dict) -> dict:
        row = {"type": "struct", "optional": True, "name": "db.public.customers.Value",
               "fields": [{"type": "int64", "optional": False, "field": "id"},
                          {"type": "string", "optional": True, "field": "name"},
                          {"type": "string", "optional": True, "field": "tier"}]}
        schema = {"type": "struct", "name": "db.public.customers.Envelope", "optional": False,
                  "fields": [{**row, "field": "before"}, {**row, "field": "after"},
                             {"type": "struct", "optional": False, "field": "source",
                              "fields": [{"type": "int64", "optional": True, "field": "lsn"}]},
                             {"type": "string", "optional": False, "field": "op"},
                             {"type": "int64", "optional": True, "field": "ts_ms"}]}
        return {"schema": schema, "payload": payload}


KINDS = {kind.name: kind for kind in (InsertOnly(), Upsert(), Tombstones(), Changes(), HardDeletes(), History(),
                                      ChangesWithTheirSchema())}


# --- one cell: a kind, one table or a table per topic, a format -----------------------------


@dataclass
class Cell:
    kind: Kind
    per_topic: bool
    format: str
    root: Path
    topics: list[str]
    file: Path
    encode: Callable[[str, Record], bytes | None]

    @property
    def name(self) -> str:
        return "matrix"

    def pipeline(self, kafka):
        return load_file(self.file, environ={"KAFKA_BOOTSTRAP": kafka.bootstrap}).pipeline

    def tables(self, kafka) -> dict[str, str]:
        """Each topic's table path, as the pipeline renders it."""
        pipeline = self.pipeline(kafka)
        if not self.per_topic:
            return {topic: pipeline.target.path for topic in self.topics}
        return {topic: template.for_topic(pipeline, topic).target.path for topic in self.topics}


def write_spec(root: Path, kind: Kind, topics: list[str], per_topic: bool, prefix: str, registry) -> Path:
    spec = kind.spec()
    subscription = {"pattern": rf"{prefix}\..*"} if per_topic else {"topics": topics}
    where = "${topic}" if per_topic else "matrix"
    source = {"kafka": {"bootstrap_servers": "${KAFKA_BOOTSTRAP}", **subscription}, "format": "json",
              **spec["source"]}
    if registry is not None:
        source = {**source, "format": "avro",
                  "registry": {"url": registry.url, "auth": {"basic": f"{REGISTRY_USER}:{REGISTRY_PASSWORD}"}}}
        source.pop("schema")
    document = {"name": "matrix", "source": source,
                **({"uid": spec["uid"]} if "uid" in spec else {}), **({"cdc": spec["cdc"]} if "cdc" in spec else {}),
                "target": {"path": str(root / "tables" / where), **spec["target"]},
                "checkpoint": str(root / "checkpoints" / "matrix"),
                "dead_letter": {"path": str(root / "dead_letter" / where)},
                **({"table_threads": 1} if per_topic else {})}  # tables in order: between_tables is exact
    path = root / "matrix.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def encoder(kind: Kind, registry) -> Callable[[str, Record], bytes | None]:
    if registry is None:
        return lambda topic, r: JSON_BAD if r.payload == BAD else (
            None if r.payload is None else json.dumps(kind.wire(r.payload)).encode())
    from tests.integration.test_avro import serialized

    return lambda topic, r: AVRO_BAD if r.payload == BAD else (
        None if r.payload is None else serialized(registry, topic, kind.avro_schema, r.payload))


def produce(producer: Producer, cell: Cell, phase_of: dict[str, list[Record]]) -> None:
    for topic, records in phase_of.items():
        for r in records:
            producer.produce(topic, value=cell.encode(topic, r), partition=r.partition,
                             key=None if r.key is None else cell.kind.wire_key(r.key).encode(),
                             headers=[("message-id", r.uid.encode())] if r.uid else [])
    assert producer.flush(30) == 0


def verify_command(cell: Cell, capsys) -> tuple[int, str]:
    """`ingest verify` as the command runs, in this process: its exit code and what it printed."""
    capsys.readouterr()
    code = cli.main(["verify", str(cell.file)])
    return code, capsys.readouterr().out


def dead_letters(spark, cell: Cell, kafka) -> list[tuple]:
    pipeline = cell.pipeline(kafka)
    paths = ({template.for_topic(pipeline, t).dead_letter.path for t in cell.topics} if cell.per_topic
             else {pipeline.dead_letter.path})
    return [(r._topic, r._partition, r._offset) for path in paths
            for r in table(spark, path).where("stage = 'decode'").select("_topic", "_partition", "_offset").collect()]


CELLS = [(kind, layout, "json") for kind in KINDS if kind != "cdc_messages"
         for layout in ("one_table", "per_topic")] + \
    [("insert_only", "one_table", "avro"), ("cdc", "one_table", "avro"),
     ("cdc_messages", "per_topic", "json")]  # the whole-database shape: no schema, a table per topic
# Where `ingest.verify` (the API) audits too, beside the command: one cell per audit it dispatches to.
API_CELLS = {("insert_only", "one_table", "json"), ("cdc", "one_table", "json")}
# Cells another #27 helper is fixing: strict, so the mark must go once the fix lands.
KNOWN: dict[tuple[str, str, str], str] = {}


def vectors_as_the_kind_wants(spark, kind_name: str, path: str) -> None:
    """Deletion vectors on where the kind's MERGE updates or deletes (ingest's default, so every
    cell but insert_only goes through its crashes, recovery, replay and verify with them), and
    written there by the MERGEs; off for insert_only."""
    located = DeltaTable.forPath(spark, path)
    on = (located.detail().first().properties or {}).get("delta.enableDeletionVectors")
    assert on == ("false" if kind_name == "insert_only" else "true"), f"{path}: delta.enableDeletionVectors {on}"
    added = sum(int((row.operationMetrics or {}).get("numTargetDeletionVectorsAdded") or 0)
                for row in located.history().collect() if row.operation == "MERGE")
    assert (added > 0) == (on == "true"), f"{path}: {added} deletion vectors added by its MERGEs"


def test_the_api_cells_are_cells_of_the_matrix():
    assert API_CELLS <= set(CELLS), "a cell named for the API check is not in the matrix"


def cell_params():
    for kind, layout, form in CELLS:
        reason = KNOWN.get((kind, layout, form))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(kind, layout, form, id=f"{kind}-{layout}-{form}", marks=marks)


@pytest.mark.parametrize(("kind_name", "layout", "form"), list(cell_params()))
def test_every_kind_is_exact_through_crashes_a_lost_checkpoint_and_a_replay(
        spark, kafka, tmp_path, monkeypatch, capsys, request, kind_name, layout, form):
    monkeypatch.setenv(faults.CONFIRM_VARIABLE, faults.CONFIRM_VALUE)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    kind, per_topic = KINDS[kind_name], layout == "per_topic"
    registry = request.getfixturevalue("registry") if form == "avro" else None
    prefix = f"mx{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.a", f"{prefix}.b"] if per_topic else [f"{prefix}.a"]
    for topic in topics:
        create_topic(kafka.client_config(), topic, partitions=2)
    file = write_spec(tmp_path, kind, topics, per_topic, prefix, registry)
    cell = Cell(kind, per_topic, form, tmp_path, topics, file, encoder(kind, registry))
    phases = {topic: kind.phases(f"{topic}") for topic in topics}
    pipeline = cell.pipeline(kafka)
    # One for the cell's four phases: a new idempotent producer waits for its producer id
    # before the first flush, about half a second each time.
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    request.addfinalizer(producer.close)  # not left connected to the broker the session stops

    def phase(n: int) -> None:
        produce(producer, cell, {topic: phases[topic][n] for topic in topics})

    phase(0)
    run_recovering(spark, pipeline, timeout=600)  # batch 0: the tables exist
    phase(1)
    # Each at batch 1, the state each leaves the next run's to repair. A table per topic runs
    # every table through the single-table path (a processor per table), so its cell adds the
    # point only it has, and the one that leaves a table committed, not the two before.
    points = ("between_tables", "after_target_commit") if per_topic else (
        "before_dead_letter", "after_dead_letter", "after_target_commit")
    for point in points:
        crash_at(spark, pipeline, point)
    run_recovering(spark, pipeline, timeout=600)  # batch 1 again, the checkpoint behind the Delta log
    phase(2)
    crash_at(spark, pipeline, "after_target_commit")
    shutil.rmtree(pipeline.checkpoint)  # lost after a crash between the two commits
    phase(3)
    plan, _ = run_recovering(spark, pipeline, timeout=600)
    assert plan.starting_offsets, "the run did not start from the offsets in the Delta logs"

    tables = cell.tables(kafka)
    observed = {topic: kind.observed(spark, tables[topic]) for topic in topics}
    for topic in topics:
        produced = [r for n in range(4) for r in phases[topic][n]]
        assert observed[topic] == kind.expected(produced), f"{topic}'s table"
    for topic in topics:
        vectors_as_the_kind_wants(spark, kind_name, tables[topic])
    bad = sum(r.payload == BAD for topic in topics for n in range(4) for r in phases[topic][n])
    found = dead_letters(spark, cell, kafka)
    assert len(found) == len(set(found)) == bad, f"dead letters {found}, {bad} bad records produced"

    if not per_topic:  # `ingest replay` of everything committed changes nothing
        from ingest.stream.replay import replay, resolve_range

        replay(spark, pipeline, resolve_range(spark, pipeline, from_ms=0))
        assert kind.observed(spark, tables[topics[0]]) == observed[topics[0]], "the replay changed the table"
        assert sorted(dead_letters(spark, cell, kafka)) == sorted(found), "the replay changed the dead letters"

    code, output = verify_command(cell, capsys)
    assert code == 0, output
    assert f"verify {cell.name}: OK" in output and "FAILED" not in output, output
    if (kind_name, layout, form) in API_CELLS:  # the command prints the API's report (one dispatch,
        # ingest/audit/dispatch.py): the API once per audit here; a table per topic in test_verify_cdc.py
        assert ingest.verify(spark, cell.file).ok

    kind.tamper(spark, tables[topics[0]])  # the command only: it and the API share one dispatch
    code, output = verify_command(cell, capsys)
    assert code == 1, output
    assert f"verify {cell.name}: FAILED" in output, output
