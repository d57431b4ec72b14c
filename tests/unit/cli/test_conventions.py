"""Command-line conventions and bad input: a message and exit 2, never a traceback."""

from __future__ import annotations

import json
import sys

import pytest

import ingest
from ingest.cli import COMMANDS, build_parser, main
from ingest.cli import plan as cli_plan
from ingest.errors import IngestError, Problem, SpecErrors
from tests.unit.cli import test_screens
from tests.unit.cli.test_screens import WITH_SECRETS, write

project = test_screens.project  # the same project-folder fixture


def outcome(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:  # argparse's version action exits 0
        build_parser().parse_args(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"ingest {ingest.__version__}"
    assert main(["--version"]) == 0


def test_every_command_takes_env_and_conf_dir():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps them here
    assert {"validate", "plan", "run", "status", "verify", "produce", "demo"} <= set(commands)
    for name, command in commands.items():
        options = {flag for action in command._actions for flag in action.option_strings}
        assert {"--env", "--conf-dir", "--help"} <= options, name


def test_non_utf8_pipeline(project, capsys):
    (project / "pipelines" / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    code, out, _ = outcome(capsys, "validate", "--no-spark", "pipelines/latin1.yaml")
    assert code == 2
    assert out.splitlines() == [
        "pipelines/latin1.yaml: cannot read the file (not UTF-8: byte 0xe9 at position 9); "
        "expected a readable UTF-8 YAML file", "1 error in pipelines/latin1.yaml"]


def test_a_folder_given_as_the_pipeline(project, capsys):
    code, out, _ = outcome(capsys, "validate", "--no-spark", "pipelines")
    assert code == 2
    assert out.startswith("pipelines: cannot read the file (Is a directory)")


def test_non_utf8_conf_file(project, capsys):
    (project / "conf" / "legacy.yaml").write_bytes(b"vars:\n  DATA_ROOT: /d\xe9p\n")
    code, out, err = outcome(capsys, "plan", "--env", "legacy", "pipelines/orders.yaml")
    assert code == 2
    assert out == ""
    assert err.splitlines()[0] == ("conf/legacy.yaml: cannot read the conf file (not UTF-8: byte 0xe9 "
                                   "at position 21); expected a readable UTF-8 YAML file")


def test_conf_dir_that_does_not_exist(project, capsys):
    code, out, err = outcome(capsys, "validate", "--no-spark", "--conf-dir", "nowhere")
    assert code == 2
    assert out.splitlines()[0] == ("nowhere: no such folder; expected a folder of <env>.yaml conf files "
                                   "(--conf-dir or INGEST_CONF_DIR)")


def test_missing_section_is_reported_once(project, capsys, golden):
    file = write(project, "bare.yaml", "name: bare\nuid:\n  header: message-id\n")
    code, out, _ = outcome(capsys, "validate", "--no-spark", file)
    assert code == 2
    assert [line.split(": ")[1] for line in out.splitlines()[:-1]] == ["checkpoint", "source", "target"]
    golden("validate_missing_sections", out)


def test_yml_pipelines_and_conf(project, capsys):
    (project / "pipelines" / "orders.yaml").rename(project / "pipelines" / "orders.yml")
    (project / "conf" / "cluster.yaml").rename(project / "conf" / "cluster.yml")
    code, out, _ = outcome(capsys, "validate", "--no-spark", "--env", "cluster")
    assert code == 0
    assert "OK pipelines/orders.yml" in out.splitlines()


NEEDS_SPARK = sorted(name for name, module in COMMANDS.items() if module.NEEDS_SPARK)
# The fewest arguments each command parses with; a command missing here fails the test below.
SMALLEST_ARGV = {"run": ["pipelines/orders.yaml"], "status": ["pipelines/orders.yaml"],
                 "verify": ["pipelines/orders.yaml"], "maintain": ["pipelines/orders.yaml"],
                 "replay": ["pipelines/orders.yaml", "--from-timestamp", "0"], "demo": []}


def test_every_command_module_says_whether_it_needs_spark():
    assert set(COMMANDS) == set(build_parser()._subparsers._group_actions[0].choices)
    assert all(isinstance(module.NEEDS_SPARK, bool) for module in COMMANDS.values())
    assert {"run", "status", "verify", "maintain", "replay", "demo"} <= set(NEEDS_SPARK)


@pytest.mark.parametrize("command", NEEDS_SPARK)
def test_commands_that_need_spark_say_how_to_get_it(project, capsys, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark` now raises ImportError
    argv = [command, *SMALLEST_ARGV[command]]
    code, out, err = outcome(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err == ("error: pyspark is not installed; expected `pip install 'ingest[spark]'` "
                   "(on Databricks it is there already)\n")


def test_validate_strict_fails_without_spark(project, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)
    code, out, err = outcome(capsys, "validate", "pipelines/orders.yaml")
    assert code == 0 and "schema and SQL checks skipped" in err
    code, out, err = outcome(capsys, "validate", "--strict", "pipelines/orders.yaml")
    assert code == 2
    assert "--strict: the schema and SQL checks could not run" in err


def test_validate_json(project, capsys):
    file = write(project, "broken.yaml", (project / "pipelines" / "orders.yaml").read_text()
                 .replace("name: orders", "name: Orders"))
    code, out, _ = outcome(capsys, "validate", "--no-spark", "--json", "pipelines/orders.yaml", file)
    assert code == 2
    report = json.loads(out)
    assert report["ok"] is False
    good, bad = report["files"]
    assert good == {"file": "pipelines/orders.yaml", "ok": True, "problems": []}
    assert bad["problems"][0] == {"file": "pipelines/broken.yaml", "line": 5, "path": "name",
                                  "code": "bad_name", "warning": False,
                                  "message": bad["problems"][0]["message"]}


def test_plan_json_masks_secrets(project, capsys, monkeypatch):
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    file = write(project, "payments.yaml", WITH_SECRETS)
    code, out, _ = outcome(capsys, "plan", "--json", "--env", "cluster", file)
    assert code == 0
    assert "hunter2" not in out and "PlainLoginModule" not in out
    plan = json.loads(out)
    assert plan["pipeline"] == "payments"
    assert plan["kafka_options"]["kafka.sasl.jaas.config"] == "***"
    assert plan["merge"].startswith("MERGE WITH SCHEMA EVOLUTION INTO main.finance.payments")


@pytest.mark.parametrize("raised,code,shown", [
    (IngestError("the broker refused password hunter2"), 1, "error: the broker refused password ***\n"),
    (SpecErrors([Problem("bad_sql", "transform.where", "hunter2 is not a column", 3, "p.yaml")]), 2,
     "p.yaml:3: transform.where: *** is not a column\n1 error in p.yaml\n"),
])
def test_main_maps_what_a_command_raises_to_its_exit_code_masking_secrets(
        project, capsys, monkeypatch, raised, code, shown):
    """One place for every command: after the pipeline loaded, its secrets are masked in the error."""
    monkeypatch.setenv("KAFKA_PASSWORD", "hunter2")
    file = write(project, "payments.yaml", WITH_SECRETS)

    def fails_after_loading(loaded, settings):
        raise raised

    monkeypatch.setattr(cli_plan, "render_plan", fails_after_loading)
    assert outcome(capsys, "plan", "--env", "cluster", file) == (code, "", shown)
