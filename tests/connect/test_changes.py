"""CDC (soft deletes, hard deletes, history) and tombstones by key on Spark Connect.

The events are test_matrix.py's for each kind, and the table they must end as is the one
that test computes from them, the table the classic path is proven to write. Two runs: the
second brings a change that meets the rows the first one wrote (cdc: a change older than
the key's row; tombstones: a re-sent version), then deletes, re-creations and re-sent
changes of its own.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

import ingest
from ingest.kafka.local_broker import create_topic
from tests.integration.test_matrix import BAD, KINDS, Cell, dead_letters, encoder, produce, write_spec


def latest_version(spark, path: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0].version


@pytest.mark.parametrize("kind_name", ["cdc", "cdc_hard", "cdc_history", "tombstones"])
def test_each_kind_of_change_writes_the_table_the_classic_path_writes(kafka, connect_spark, tmp_path,
                                                                      monkeypatch, request, kind_name):
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    kind = KINDS[kind_name]
    topic = f"connect{uuid.uuid4().hex[:8]}.a"
    create_topic(kafka.client_config(), topic, partitions=2)
    file = write_spec(tmp_path, kind, [topic], per_topic=False, prefix=topic, registry=None)
    cell = Cell(kind, False, "json", tmp_path, [topic], file, encoder(kind, None))
    produced = [record for phase in kind.phases(topic) for record in phase]
    # the first run ends one record before the workload's second phase does
    second_run_from = len(kind.phases(topic)[0]) + len(kind.phases(topic)[1]) - 1
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    request.addfinalizer(producer.close)

    for records in (produced[:second_run_from], produced[second_run_from:]):
        produce(producer, cell, {topic: records})
        [outcome] = ingest.run(connect_spark, file, once=True)
        assert (outcome.error, outcome.batches) == (None, 1)

    target = cell.tables(kafka)[topic]
    assert kind.observed(connect_spark, target) == kind.expected(produced)
    found = dead_letters(connect_spark, cell, kafka)
    assert len(found) == len(set(found)) == sum(r.payload == BAD for r in produced)

    versions = [latest_version(connect_spark, target)]
    if kind.deletes_log:
        versions.append(latest_version(connect_spark, target + "_deletes"))
    [again] = ingest.run(connect_spark, file, once=True)  # nothing new: no commit anywhere
    assert (again.error, again.batches) == (None, 0)
    assert versions[0] == latest_version(connect_spark, target)
    if kind.deletes_log:
        assert versions[1] == latest_version(connect_spark, target + "_deletes")
    audit = ingest.verify(connect_spark, file)
    assert audit.ok, audit
