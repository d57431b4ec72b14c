"""target.properties and dead_letter.properties: Delta table properties, checked with
file:line:key before anything runs (ingest/spec/properties.py)."""

from __future__ import annotations

import pytest

from ingest.batch.merge.properties import ingest_properties
from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from tests.unit.spec.test_loader import ENVIRON, MINIMAL, SETTINGS

TARGET = "target:\n  path: ${DATA_ROOT}/tables/orders\n"


def load(text):
    return load_text(text, "p.yaml", environ=ENVIRON, settings=SETTINGS).pipeline


def with_target(extra: str, mode: str = "") -> str:
    return MINIMAL.replace(TARGET, TARGET + mode + extra)


def test_properties_load_round_trip_and_keep_the_dead_letters_default_location():
    text = with_target('  properties: {delta.enableChangeDataFeed: "true", delta.logRetentionDuration: '
                       '"interval 60 days"}\n') + 'dead_letter:\n  properties: {delta.appendOnly: "false"}\n'
    pipeline = load(text)
    assert dict(pipeline.target.properties) == {"delta.enableChangeDataFeed": "true",
                                                "delta.logRetentionDuration": "interval 60 days"}
    assert dict(pipeline.dead_letter.properties) == {"delta.appendOnly": "false"}
    assert pipeline.dead_letter.path == pipeline.target.path + "_dead_letter"
    assert load(to_yaml(to_document(pipeline))) == pipeline


def test_ingest_turns_deletion_vectors_on_where_the_merge_updates_and_off_for_insert_only():
    upsert = load(with_target("  order_by: ts\n", mode="  mode: upsert\n")).target
    insert_only = load(MINIMAL).target
    assert ingest_properties(upsert)["delta.enableDeletionVectors"] == "true"
    assert ingest_properties(insert_only)["delta.enableDeletionVectors"] == "false"
    assert ingest_properties(insert_only)["delta.checkpointInterval"] == "100"


@pytest.mark.parametrize("extra,where,message", [
    ("  properties: {enableChangeDataFeed: 'true'}\n", "p.yaml:11: target.properties.enableChangeDataFeed",
     "is not a Delta table property; expected a key starting with delta. (did you mean "
     "'delta.enableChangeDataFeed'?)"),
    ("  properties: {delta.enableChangeDataFeed: true}\n",
     "p.yaml:11: target.properties.delta.enableChangeDataFeed", 'write "true" in quotes'),
    ("  properties: {delta.checkpointInterval: 10}\n", "p.yaml:11: target.properties.delta.checkpointInterval",
     "found the number 10; expected text"),
    ("  properties: {delta.enableDeletionVectors: 'yes'}\n",
     "p.yaml:11: target.properties.delta.enableDeletionVectors", "expected \"true\" or \"false\""),
    ("  properties: [delta.appendOnly]\n", "p.yaml:11: target.properties", "a mapping of Delta table"),
])
def test_bad_properties_name_file_line_and_key(extra, where, message):
    with pytest.raises(SpecErrors) as raised:
        load(with_target(extra))
    text = str(raised.value)
    assert where in text and message in text, text


def test_append_only_is_refused_where_the_merge_updates():
    with pytest.raises(SpecErrors) as raised:
        load(with_target("  order_by: ts\n  properties: {delta.appendOnly: 'true'}\n", mode="  mode: upsert\n"))
    assert "target.properties.delta.appendOnly: the target's MERGE updates and deletes rows" in str(raised.value)
    assert dict(load(with_target("  properties: {delta.appendOnly: 'true'}\n")).target.properties) == {
        "delta.appendOnly": "true"}
