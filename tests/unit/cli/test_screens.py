"""`ingest validate` and `ingest plan`: rendered screens against golden files, exit codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ingest.cli import main

REPO = Path(__file__).resolve().parents[3]
VARIABLES = ("KAFKA_BOOTSTRAP", "DATA_ROOT", "KAFKA_PASSWORD", "KAFKA_JAAS_CONFIG",
             "INGEST_CONF_DIR")

FIVE_MISTAKES = """\
name: Orders
source:
  kafka:
    bootstrap_servers: ${KAFKA_BROKERS}
    topics: [orders]
  format: json
  schema: "order_id STRING, ts TIMESTAMP"
uid:
  header: message-id
  field: order_id
target:
  path: ${DATA_ROOT}/tables/orders
  mode: upsrt
  dedup_horizon:
    column: ts
    within: "1 hr"
checkpoint: ${DATA_ROOT}/checkpoints/orders
"""

WITH_SECRETS = """\
name: payments
source:
  kafka:
    bootstrap_servers: ${KAFKA_BOOTSTRAP}
    topics: [payments]
    options:
      security.protocol: SASL_SSL
      sasl.mechanism: PLAIN
      sasl.jaas.config: >-
        org.apache.kafka.common.security.plain.PlainLoginModule required
        username="ingest" password="${KAFKA_PASSWORD}";
  format: string
uid:
  coordinates: true
target:
  table: main.finance.payments
checkpoint: ${DATA_ROOT}/checkpoints/payments
spark_conf:
  spark.hadoop.fs.s3a.secret.key: ${KAFKA_PASSWORD}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with the repository's conf/ and pipelines/, as the cwd."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    shutil.copytree(REPO / "conf", tmp_path / "conf")
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def write(project, name, text):
    path = project / "pipelines" / name
    path.write_text(text)
    return f"pipelines/{name}"


def test_validate_examples(project, capsys, golden):
    code, out = run(capsys, "validate", "--no-spark")
    assert code == 0
    golden("validate_ok", out)


def test_validate_five_mistakes(project, capsys, golden):
    file = write(project, "broken.yaml", FIVE_MISTAKES)
    code, out = run(capsys, "validate", "--no-spark", file)
    assert code == 2
    assert out.splitlines()[-1] == "5 errors in pipelines/broken.yaml"
    golden("validate_five_mistakes", out)


def test_validate_syntax_error(project, capsys, golden):
    file = write(project, "broken.yaml", FIVE_MISTAKES.replace("  format: json", " format: json"))
    code, out = run(capsys, "validate", "--no-spark", file)
    assert code == 2
    golden("validate_syntax_error", out)


def test_validate_reports_good_and_bad_files_together(project, capsys, golden):
    write(project, "broken.yaml", FIVE_MISTAKES.replace("name: Orders", "name: orders"))
    code, out = run(capsys, "validate", "--no-spark")
    assert code == 2
    golden("validate_mixed", out)


def test_validate_two_pipelines_with_one_name(project, capsys, golden):
    copy = (project / "pipelines" / "orders.yaml").read_text()
    file = write(project, "orders_copy.yaml", copy.replace("checkpoints/orders", "checkpoints/copy")
                                                .replace("tables/orders", "tables/copy"))
    code, out = run(capsys, "validate", "--no-spark", "pipelines/orders.yaml", file)
    assert code == 2
    golden("validate_duplicate_name", out)


def test_validate_unknown_env(project, capsys, golden):
    code, out = run(capsys, "validate", "--no-spark", "--env", "staging")
    assert code == 2
    golden("validate_unknown_env", out)


def test_validate_masks_secrets_in_errors(project, capsys, monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    file = write(project, "broken.yaml", WITH_SECRETS.replace(
        "topics: [payments]", "topics: [payments]\n    max_offsets_per_trigger: ${KAFKA_PASSWORD}"))
    code, out = run(capsys, "validate", "--no-spark", file)
    assert code == 2
    assert "hunter2" not in out and "***" in out


def test_validate_warning_is_shown_with_ok(project, capsys, monkeypatch, golden):
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    file = write(project, "payments.yaml", WITH_SECRETS)
    code, out = run(capsys, "validate", "--no-spark", file)
    assert code == 0
    golden("validate_warning", out)


def test_validate_without_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-spark"]) == 2
    assert capsys.readouterr().err.startswith("no pipeline files")


def test_plan_orders(project, capsys, golden):
    code, out = run(capsys, "plan", "pipelines/orders.yaml")
    assert code == 0
    golden("plan_orders", out.replace(str(project), "<project>"))


def test_plan_customers_shows_the_upsert_rule(project, capsys, golden):
    code, out = run(capsys, "plan", "pipelines/customers.yaml")
    assert code == 0
    golden("plan_customers", out.replace(str(project), "<project>"))


def test_plan_prints_absolute_locations_and_the_sql_to_read_the_table(project, capsys):
    # issue 54.4: `SELECT * FROM delta.`./.ingest/...`` fails; what plan prints must paste
    code, out = run(capsys, "plan", "pipelines/orders.yaml")
    assert code == 0
    target = project / ".ingest" / "data" / "tables" / "orders"
    assert f"  Delta table at {target}\n  read it: SELECT * FROM delta.`{target}`\n" in out
    assert f"  checkpoint: {project / '.ingest' / 'data' / 'checkpoints' / 'orders'}\n" in out
    assert f"MERGE WITH SCHEMA EVOLUTION INTO delta.`{target}` AS t" in out
    assert "Delta table at ./" not in out


def test_plan_masks_secrets_by_key_and_by_value(project, capsys, monkeypatch, golden):
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    file = write(project, "payments.yaml", WITH_SECRETS)
    code, out = run(capsys, "plan", "--env", "cluster", file)
    assert code == 0
    assert "hunter2" not in out and "PlainLoginModule" not in out
    golden("plan_secrets_masked", out)


def test_plan_of_a_broken_file(project, capsys):
    file = write(project, "broken.yaml", FIVE_MISTAKES)
    assert main(["plan", file]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # diagnostics go to stderr; stdout is for results
    assert err.splitlines()[-1] == "5 errors in pipelines/broken.yaml"


def test_help_and_bad_arguments(capsys):
    assert main(["--help"]) == 0
    assert main(["plan"]) == 2
    assert main(["nonsense"]) == 2
    capsys.readouterr()


def test_plan_names_on_data_loss_and_the_change_columns(project, capsys):
    """issue 54.5: plan printed allow_data_loss (the old name) and no cdc columns."""
    code, out = run(capsys, "plan", "pipelines/customers_cdc.yaml")
    assert code == 0
    assert "allow_data_loss" not in out and "\n  on_data_loss: fail\n" in out
    assert ("columns: _uid, the payload, _topic, _partition, _offset, _kafka_timestamp, _ingested_at, "
            "_sequence, _op, _deleted, _valid_from, _valid_to, _current\n") in out
