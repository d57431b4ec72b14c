"""conf/<env>.yaml, variable lookup order, and masking."""

from __future__ import annotations

import pytest

from ingest.errors import SpecErrors
from ingest.spec.settings import (
    MASK,
    Settings,
    is_secret_key,
    load_settings,
    lookup,
    mask,
    mask_mapping,
    settings_from_text,
)

CONF = """\
vars:
  KAFKA_BOOTSTRAP: broker:9092
  DATA_ROOT: /data
  PARTITIONS: 4
secrets: [KAFKA_PASSWORD]
"""


def test_conf_vars_and_secret_names():
    settings = settings_from_text(CONF, "conf/x.yaml", "x")
    assert settings.vars == {"KAFKA_BOOTSTRAP": "broker:9092", "DATA_ROOT": "/data",
                             "PARTITIONS": "4"}
    assert settings.secret_names == {"KAFKA_PASSWORD"}


def test_the_environment_wins_over_the_conf():
    settings = settings_from_text(CONF, "conf/x.yaml", "x")
    assert lookup(settings, "DATA_ROOT", {"DATA_ROOT": "/mnt"}).value == "/mnt"
    assert lookup(settings, "DATA_ROOT", {}).value == "/data"
    assert lookup(settings, "NOPE", {}).value is None


def test_secret_variables_are_marked():
    settings = settings_from_text(CONF, "conf/x.yaml", "x")
    assert lookup(settings, "KAFKA_PASSWORD", {"KAFKA_PASSWORD": "pw"}).secret
    assert lookup(settings, "API_TOKEN", {"API_TOKEN": "t"}).secret  # named like a secret
    assert not lookup(settings, "DATA_ROOT", {}).secret


def test_databricks_secret_scope_is_read_through_the_reader():
    text = "secret_scope: ingest\nsecrets:\n  KAFKA_PASSWORD: kafka-password\n"
    settings = settings_from_text(text, "conf/databricks.yaml", "databricks")
    found = lookup(settings, "KAFKA_PASSWORD", {}, read_secret=lambda scope, key: f"{scope}/{key}")
    assert (found.value, found.secret) == ("ingest/kafka-password", True)
    assert "secret scope 'ingest' key 'kafka-password'" in settings.places("KAFKA_PASSWORD")


def test_a_secret_written_in_the_conf_is_refused():
    with pytest.raises(SpecErrors) as raised:
        settings_from_text("vars:\n  KAFKA_PASSWORD: hunter2\nsecrets: [KAFKA_PASSWORD]\n",
                           "conf/x.yaml", "x")
    [problem] = raised.value.problems
    assert (problem.code, problem.path, problem.line) == ("bad_value", "vars.KAFKA_PASSWORD", 2)


def test_conf_problems_are_all_reported_with_lines():
    text = "vars: [a]\nsecret: [X]\nsecrets:\n  X: key\n"
    with pytest.raises(SpecErrors) as raised:
        settings_from_text(text, "conf/x.yaml", "x")
    found = [(p.code, p.path, p.line) for p in raised.value.problems]
    assert found == [("wrong_type", "vars", 1), ("unknown_key", "secret", 2),
                     ("missing_key", "secrets", 3)]


def test_unknown_env_names_the_known_ones(tmp_path):
    (tmp_path / "local.yaml").write_text("vars: {}\n")
    (tmp_path / "prod.yaml").write_text("vars: {}\n")
    with pytest.raises(SpecErrors) as raised:
        load_settings("staging", tmp_path)
    [problem] = raised.value.problems
    assert problem.code == "unknown_env"
    assert problem.message.endswith("expected one of local, prod")


def test_missing_local_conf_is_an_empty_one(tmp_path):
    settings = load_settings("local", tmp_path)
    assert (settings.found, settings.vars) == (False, {})
    assert "(no such file)" in settings.places("X")


def test_repository_confs_load():
    for env in ("local", "cluster", "databricks"):
        assert load_settings(env, "conf").env == env


@pytest.mark.parametrize("key", ["password", "ssl.keystore.password", "sasl.jaas.config",
                                 "sasl.oauthbearer.config", "api_key", "apiKey", "token",
                                 "client_secret", "basic.auth.user.info.credentials",
                                 "fs.azure.account.key.x.dfs.core.windows.net"])
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["bootstrap_servers", "security.protocol", "sasl.mechanism",
                                 "topics", "key.deserializer", "order_by"])
def test_ordinary_keys(key):
    assert not is_secret_key(key)


def test_mask_replaces_every_secret_value_longest_first():
    text = "user=app password=abc-secret-def token=abc"
    assert mask(text, {"abc", "abc-secret-def", ""}) == f"user=app password={MASK} token={MASK}"


def test_mask_mapping_masks_by_key_at_any_depth():
    values = {"options": {"sasl.jaas.config": "x", "security.protocol": "SASL_SSL"},
              "list": [{"password": "p"}]}
    assert mask_mapping(values) == {"options": {"sasl.jaas.config": MASK,
                                                "security.protocol": "SASL_SSL"},
                                    "list": [{"password": MASK}]}


def test_settings_default_is_local():
    assert Settings().env == "local"


# --- session: the master and the driver's memory of a session ingest starts -----------------


def test_the_session_settings_become_spark_settings():
    text = ("vars: {}\nsession:\n  master: local[2]\n  driver_memory: 3g\n"
            "  conf:\n    spark.hadoop.fs.s3a.endpoint.region: eu-west-1\n    spark.ui.enabled: false\n")
    settings = settings_from_text(text, "conf/prod.yaml", "prod")
    assert settings.session_conf == {"spark.master": "local[2]", "spark.driver.memory": "3g",
                                     "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
                                     "spark.ui.enabled": "false"}
    assert settings_from_text("session:\n  master: local[*]\n", "conf/x.yaml", "x").session_conf == \
        {"spark.master": "local[*]"}
    assert settings_from_text(CONF, "conf/x.yaml", "x").session_conf == {}


@pytest.mark.parametrize(("text", "problem"), [
    ("session:\n  master: yarn\n", ("bad_value", "session.master", 2)),
    ("session:\n  master: local[0]\n", ("bad_value", "session.master", 2)),
    ("session:\n  driver_memory: 2 GB\n", ("bad_value", "session.driver_memory", 2)),
    ("session:\n  driver_memory: 256m\n", ("bad_value", "session.driver_memory", 2)),
    ("session:\n  driver_memory: 2048\n", ("bad_value", "session.driver_memory", 2)),
    ("session:\n  executor_memory: 2g\n", ("unknown_key", "session.executor_memory", 2)),
    ("session: local[2]\n", ("wrong_type", "session", 1)),
    ("session:\n  conf:\n    fs.s3a.endpoint: x\n", ("bad_value", "session.conf.fs.s3a.endpoint", 3)),
    ("session:\n  conf:\n    spark.driver.memory: 4g\n", ("bad_value", "session.conf.spark.driver.memory", 3)),
    ("session:\n  conf:\n    spark.hadoop.fs.s3a.secret.key: abc\n",
     ("bad_value", "session.conf.spark.hadoop.fs.s3a.secret.key", 3)),
    ("session:\n  conf: [a]\n", ("wrong_type", "session.conf", 2)),
])
def test_a_bad_session_setting_names_its_line_and_key(text, problem):
    with pytest.raises(SpecErrors) as raised:
        settings_from_text(text, "conf/x.yaml", "x")
    assert [(p.code, p.path, p.line) for p in raised.value.problems] == [problem]
    assert raised.value.problems[0].file == "conf/x.yaml"
