"""The operations keys: metrics, maintenance and on_data_loss."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec.document import to_document, to_yaml
from ingest.spec.loader import load_text
from tests.unit.spec.test_loader import ENVIRON, MINIMAL, SETTINGS

OPERATIONS = MINIMAL + """\
metrics:
  prometheus: {port: 9464}
  consumer_group: ingest-orders
maintenance:
  optimize_every: 100
  vacuum_retain: "200 hours"
  delete_log_retain: "30 days"
on_data_loss: record
"""


def load(text):
    return load_text(text, "p.yaml", environ=ENVIRON, settings=SETTINGS).pipeline


def test_operations_keys_load_and_round_trip():
    pipeline = load(OPERATIONS)
    ops = pipeline.operations
    assert (ops.metrics.prometheus_port, ops.metrics.consumer_group) == (9464, "ingest-orders")
    assert (ops.maintenance.optimize_every_batches, ops.maintenance.vacuum_retain_seconds) == (100, 720000)
    assert ops.maintenance.delete_log_retain_seconds == 30 * 24 * 3600
    assert pipeline.records_data_loss
    assert load(to_yaml(to_document(pipeline))) == pipeline


def test_defaults_fail_on_data_loss_and_no_metrics():
    pipeline = load(MINIMAL)
    assert pipeline.operations.on_data_loss == "fail" and not pipeline.records_data_loss
    assert pipeline.operations.metrics.prometheus_port is None
    assert to_document(pipeline)["on_data_loss"] == "fail"  # plan shows the name to use (issue 54.5)
    assert pipeline.operations.maintenance.delete_log_retain_seconds == 7 * 24 * 3600


def test_optimize_every_takes_a_duration():
    pipeline = load(MINIMAL + 'maintenance: {optimize_every: "1 hour"}\n')
    assert pipeline.operations.maintenance.optimize_every_seconds == 3600


@pytest.mark.parametrize("extra,where,message", [
    ("on_data_loss: skip\n", "p.yaml:12: on_data_loss", "'skip' is not a data-loss policy"),
    ("metrics: {prometheus: {port: 70000}}\n", "p.yaml:12: metrics.prometheus.port", "70000 is too large"),
    ("metrics: {prometeus: {port: 1}}\n", "p.yaml:12: metrics.prometeus", "unknown key"),
    ('maintenance: {vacuum_retain: "1 fortnight"}\n', "p.yaml:12: maintenance.vacuum_retain",
     "is not a duration"),
    ('maintenance: {delete_log_retain: "forever"}\n', "p.yaml:12: maintenance.delete_log_retain",
     "is not a duration"),
])
def test_bad_operations_name_file_line_and_key(extra, where, message):
    with pytest.raises(SpecErrors) as raised:
        load(MINIMAL + extra)
    text = str(raised.value)
    assert where in text and message in text, text


def test_allow_data_loss_is_the_older_spelling_of_record():
    older = load(MINIMAL.replace("    topics: [orders]\n", "    topics: [orders]\n    allow_data_loss: true\n"))
    newer = load(MINIMAL + "on_data_loss: record\n")
    assert older.operations.on_data_loss == newer.operations.on_data_loss == "record"
    assert older.source.kafka.allow_data_loss and newer.source.kafka.allow_data_loss  # Spark's source skips
    with pytest.raises(SpecErrors) as raised:
        load(MINIMAL.replace("    topics: [orders]\n", "    topics: [orders]\n    allow_data_loss: true\n")
             + "on_data_loss: fail\n")
    assert "on_data_loss: fail contradicts source.kafka.allow_data_loss: true" in str(raised.value)
