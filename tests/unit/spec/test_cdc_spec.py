"""cdc, target.deletes, target.history and uid.key: defaults, rules and their file:line:path errors."""

from __future__ import annotations

import shutil

import pytest

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from ingest.spec.model import Cdc, Uid
from ingest.spec.settings import Settings

ENVIRON = {"KAFKA_BOOTSTRAP": "b:9092"}
SETTINGS = Settings(env="test", conf_file="conf/test.yaml", found=True, vars={},
                    secret_names=frozenset())

CDC = """\
name: customers_cdc
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [db.public.customers]
  schema: "id BIGINT, name STRING, email STRING, updated_at TIMESTAMP"
cdc:
  key: [id]
target:
  path: /data/tables/customers
checkpoint: /data/checkpoints/customers
"""

TOMBSTONES = """\
name: latest
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [latest]
  schema: "name STRING, ts TIMESTAMP"
uid:
  key: true
target:
  path: /data/tables/latest
  mode: upsert
  order_by: ts
  deletes: hard
checkpoint: /data/checkpoints/latest
"""


def load(text: str):
    return load_text(text, "p.yaml", environ=ENVIRON, settings=SETTINGS).pipeline


def problems(text: str) -> list[tuple[str, int, str, str]]:
    with pytest.raises(SpecErrors) as caught:
        load(text)
    return [(p.code, p.line, p.path, p.message) for p in caught.value.problems]


def test_cdc_defaults_upsert_soft_deletes_and_the_key_as_uid():
    pipeline = load(CDC)
    assert pipeline.cdc == Cdc(key=("id",), format="debezium", sequence=None)
    assert (pipeline.target.mode, pipeline.target.deletes, pipeline.target.history) == \
        ("upsert", "soft", False)
    assert pipeline.uid == Uid(field="id")


def test_a_compound_key_is_hashed_like_uid_fields():
    pipeline = load(CDC.replace("key: [id]", "key: [id, email]\n  sequence: source.lsn"))
    assert pipeline.uid == Uid(fields=("id", "email"))
    assert pipeline.cdc.sequence == "source.lsn"


def test_round_trip_through_yaml_keeps_cdc_and_deletes():
    for text in (CDC.replace("path: /data/tables/customers",
                             "path: /data/tables/customers\n  deletes: soft\n  history: true"),
                 CDC.replace("key: [id]", "key: [id]\n  sequence: ts_ms")
                 .replace("path: /data/tables/customers", "path: /data/tables/customers\n  deletes: hard"),
                 TOMBSTONES.replace("  deletes: hard\n", "")):
        pipeline = load(text)
        assert load(to_yaml(to_document(pipeline))) == pipeline


def test_uid_key_true_upsert_deletes_by_tombstone_insert_only_refuses_deletes():
    pipeline = load(TOMBSTONES)
    assert pipeline.uid == Uid(key=True) and pipeline.uid.kind == "key"
    assert pipeline.deletes_by_tombstone and pipeline.keeps_delete_log
    assert to_document(pipeline)["target"]["deletes"] == "hard"
    assert load(TOMBSTONES.replace("  deletes: hard\n", "")).target.deletes == "soft"
    found = problems(TOMBSTONES.replace("  mode: upsert\n  order_by: ts\n", ""))
    assert found[0][:3] == ("cdc_rules", 11, "target.deletes")
    assert "in insert_only a tombstone is a dead letter" in found[0][3]


def test_cdc_rules_each_with_line_and_path():
    text = CDC.replace("cdc:\n  key: [id]", "cdc:\n  key: [id]\n  sequence: version") \
              .replace("path: /data/tables/customers",
                       "path: /data/tables/customers\n  mode: insert_only\n  order_by: updated_at") \
              + "uid:\n  field: id\n"
    found = problems(text)
    assert [p[:3] for p in found] == [("cdc_rules", 12, "target.mode"),
                                      ("cdc_rules", 13, "target.order_by"), ("cdc_rules", 15, "uid")]
    assert "expected upsert" in found[0][3]
    sequence = problems(CDC.replace("cdc:\n  key: [id]", "cdc:\n  key: [id]\n  sequence: version"))
    assert sequence[0][:3] == ("bad_column", 9, "cdc.sequence")
    assert "'version' is not a column of the payload" in sequence[0][3]


def test_bad_cdc_values():
    text = CDC.replace("cdc:\n  key: [id]", "cdc:\n  format: maxwell\n  key: [idd]\n  sequence: 'source.'")
    found = problems(text)
    assert [(code, line, path) for code, line, path, _ in found] == [
        ("bad_enum", 8, "cdc.format"), ("bad_value", 10, "cdc.sequence")]
    assert "expected debezium" in found[0][3]
    missing_key = problems(CDC.replace("  key: [id]", "  sequence: ts_ms"))
    assert missing_key[0][:3] == ("missing_key", 7, "cdc.key")


def test_an_unknown_key_column_is_named():
    found = problems(CDC.replace("key: [id]", "key: [idd]"))
    assert found[0][:3] == ("bad_column", 8, "cdc.key[0]")
    assert "did you mean 'id'?" in found[0][3]


def test_deletes_and_history_need_what_deletes():
    history = TOMBSTONES.replace("deletes: hard", "history: true")
    assert problems(history)[0][:3] == ("cdc_rules", 13, "target.history")
    bad = CDC.replace("path: /data/tables/customers", "path: /data/tables/customers\n  deletes: gone")
    found = problems(bad)
    assert found[0][:3] == ("bad_enum", 11, "target.deletes")
    assert "expected soft or hard" in found[0][3]


def test_change_columns_are_reserved_with_cdc():
    found = problems(CDC.replace("updated_at TIMESTAMP", "updated_at TIMESTAMP, _deleted BOOLEAN"))
    assert found[0][:3] == ("bad_column", 6, "source.schema")
    assert "_deleted" in found[0][3]


def test_cdc_reads_avro_envelopes_and_refuses_protobuf():
    avro = CDC.replace('  schema: "id BIGINT, name STRING, email STRING, updated_at TIMESTAMP"\n',
                       "  format: avro\n  registry: {url: 'http://registry:8081'}\n")
    assert load(avro).source.format == "avro"
    found = problems(avro.replace("format: avro", "format: protobuf"))
    assert ("cdc_rules", "source.format") in [(p[0], p[2]) for p in found]


def test_cdc_encodings_name_a_columns_debezium_encoding():
    pipeline = load(CDC.replace("  key: [id]\n", "  key: [id]\n  encodings:\n"
                                "    updated_at: io.debezium.time.MicroTimestamp\n"))
    assert dict(pipeline.cdc.encodings) == {"updated_at": "io.debezium.time.MicroTimestamp"}
    assert to_document(pipeline)["cdc"]["encodings"] == {"updated_at": "io.debezium.time.MicroTimestamp"}
    with pytest.raises(SpecErrors) as error:
        load(CDC.replace("  key: [id]\n", "  key: [id]\n  encodings:\n    updated_at: micros\n"))
    assert "p.yaml:10: cdc.encodings.updated_at: 'micros' is not an encoding ingest reads" in str(error.value)
    with pytest.raises(SpecErrors) as error:
        load(CDC.replace("  key: [id]\n", "  key: [id]\n  encodings:\n    shipped: io.debezium.time.Date\n"))
    assert "cdc.encodings.shipped: 'shipped' is not a column of the payload" in str(error.value)


SQLSERVER_ORDER = "[source.commit_lsn, source.change_lsn, source.event_serial_no]"


def test_a_sequence_list_is_a_composite_order():
    pipeline = load(CDC.replace("key: [id]", f"key: [id]\n  sequence: {SQLSERVER_ORDER}"))
    assert pipeline.cdc.sequence == ("source.commit_lsn", "source.change_lsn", "source.event_serial_no")
    assert load(to_yaml(to_document(pipeline))) == pipeline
    one = load(CDC.replace("key: [id]", "key: [id]\n  sequence: [source.lsn]"))
    assert one.cdc.sequence == "source.lsn"  # a one-item list is that item
    with_column = load(CDC.replace("key: [id]", "key: [id]\n  sequence: [updated_at, source.lsn]"))
    assert with_column.cdc.sequence_items == ("updated_at", "source.lsn")


def test_a_bad_sequence_list_names_the_key():
    empty = problems(CDC.replace("key: [id]", "key: [id]\n  sequence: []"))
    assert [p[:3] for p in empty] == [("bad_value", 9, "cdc.sequence")]
    assert "empty list; expected a list of source.<field>, ts_ms or a row column" in empty[0][3]
    number = problems(CDC.replace("key: [id]", "key: [id]\n  sequence: [source.lsn, 7]"))
    assert [p[:3] for p in number] == [("wrong_type", 9, "cdc.sequence[1]")]
    assert 'found the number 7; expected source.<field>, ts_ms or a row column (write "7" in quotes)' \
        == number[0][3]
    found = problems(CDC.replace("key: [id]", "key: [id]\n  sequence: [source.lsn, 'source.', source.lsn]"))
    assert [p[:3] for p in found] == [("bad_value", 9, "cdc.sequence[1]"), ("bad_value", 9, "cdc.sequence[2]")]
    column = problems(CDC.replace("key: [id]", "key: [id]\n  sequence: [source.lsn, emial]"))
    assert column[0][:3] == ("bad_column", 9, "cdc.sequence[1]") and "did you mean 'email'?" in column[0][3]
    wrong = problems(CDC.replace("key: [id]", "key: [id]\n  sequence: {lsn: 1}"))
    assert [p[2] for p in wrong] == ["cdc.sequence"]
    assert "or a list of them for a composite order" in wrong[0][3]


def test_validate_exits_2_on_a_sequence_of_the_wrong_type(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from ingest.cli import main

    repository = Path(__file__).resolve().parents[3]
    for folder in ("conf", "pipelines"):
        shutil.copytree(repository / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "b:9092")
    (tmp_path / "pipelines" / "customers_cdc.yaml").write_text(
        CDC.replace("key: [id]", "key: [id]\n  sequence: 42"))
    assert main(["validate", "--no-spark", "pipelines/customers_cdc.yaml"]) == 2
    out = capsys.readouterr().out
    assert "customers_cdc.yaml:9: cdc.sequence:" in out and "or a list of them" in out


def test_plan_names_the_composite_order():
    from ingest.cli.plan import _target

    pipeline = load(CDC.replace("key: [id]", f"key: [id]\n  sequence: {SQLSERVER_ORDER}"))
    assert ("each key ends as its last change by source.commit_lsn, then source.change_lsn, then "
            "source.event_serial_no (compared in turn; a missing later item first) (ties: the later "
            "partition, then offset)") in _target(pipeline)


def test_cdc_with_json_may_omit_the_schema_its_columns_then_come_from_the_messages():
    pipeline = load(CDC.replace('  schema: "id BIGINT, name STRING, email STRING, updated_at TIMESTAMP"\n', ""))
    assert pipeline.source.schema is None and pipeline.columns_from_messages
    assert not load(CDC).columns_from_messages
    assert problems(CDC.replace('  schema: "id BIGINT, name STRING, email STRING, updated_at TIMESTAMP"\n', "")
                    .replace("cdc:\n  key: [id]\n", "uid: {field: id}\n"))[0][:3] == ("schema_rules", 2, "source")


NO_SCHEMA = CDC.replace('  schema: "id BIGINT, name STRING, email STRING, updated_at TIMESTAMP"\n', "")


def test_without_a_schema_cdc_key_may_be_omitted_the_key_then_comes_from_the_message_key():
    pipeline = load(NO_SCHEMA.replace("cdc:\n  key: [id]\n", "cdc:\n  format: debezium\n"))
    assert pipeline.cdc.key == () and pipeline.key_from_messages and pipeline.columns_from_messages
    assert "key" not in to_document(pipeline)["cdc"]  # the resolved spec loads back the same
    assert load(to_yaml(to_document(pipeline))).cdc == pipeline.cdc
    keyed = pipeline.with_key(("id", "region"))
    assert keyed.cdc.key == ("id", "region") and keyed.uid == Uid(fields=("id", "region"))
    assert not keyed.key_from_messages
    assert not load(NO_SCHEMA).key_from_messages  # cdc.key given: it wins


@pytest.mark.parametrize("source", [
    CDC,  # a declared schema
    NO_SCHEMA.replace("    topics: [db.public.customers]\n",
                      "    topics: [db.public.customers]\n  schemas:\n    db.public.customers: \"id BIGINT\"\n"),
], ids=["schema", "schemas"])
def test_where_a_topic_declares_its_columns_cdc_key_stays_required(source):
    found = [p for p in problems(source.replace("cdc:\n  key: [id]\n", "cdc:\n  format: debezium\n"))
             if p[2].startswith("cdc")]
    assert found == [("missing_key", 7 if source is CDC else 8, "cdc.key",
                      "is missing; expected a list of the row's key columns, e.g. [id]")]


def test_plan_says_where_the_key_comes_from():
    from ingest.cli.plan import _key_rule, _key_text, _target

    pipeline = load(NO_SCHEMA.replace("cdc:\n  key: [id]\n", "cdc:\n  format: debezium\n"))
    assert "uid: each table's key columns, from its message keys' schema" in _target(pipeline)
    assert "kept on the table (ingest.cdc.key)" in _key_rule(pipeline)
    assert _key_text(pipeline, ("id",)) == "(id) from the message key's schema"
    assert _key_text(load(NO_SCHEMA), ()) == "(id) from cdc.key"
    assert "uid: payload column id -> _uid" in _target(load(NO_SCHEMA))
