"""deploy/ and docs/production.md's service examples, as a new user would install them.

systemd: the unit docs/production.md prints is deploy/systemd's file, `systemd-analyze verify`
accepts it on a root laid out as the page's install steps lay it out (a comment after a value,
a key in the wrong section and a missing executable are all reported there), and its
`ExecStart` is an `ingest run` that reads conf/prod.yaml and the pipeline from its
`WorkingDirectory`. Kubernetes: kubectl is not available here, so the manifest is checked for
structure: the ConfigMap carries the repository's files, the command is an argv `ingest`'s
own parser accepts, the pipeline loads with the Deployment's environment, the probes ask
`/metrics` on the port that pipeline serves, and the memory asked for holds the session's heap."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import yaml

from ingest import cli
from ingest.spec.loader import load_text
from ingest.spec.settings import MEMORY, MEMORY_MIB, settings_from_text
from ingest.stream.lease import STALE_AFTER_S

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "production.md"
UNIT = REPO / "deploy" / "systemd" / "ingest-orders.service"
MANIFEST = REPO / "deploy" / "kubernetes" / "ingest-orders.yaml"
PIPELINE = REPO / "deploy" / "pipelines" / "orders.yaml"
PROD = REPO / "conf" / "prod.yaml"
# What the JVM and Python need beside the heap: docs/production.md, "What a service needs"
HEADROOM_MIB = 1024


def section(title: str) -> str:
    return PAGE.read_text().split(f"### {title}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def mib(size: str) -> float:
    """A JVM size (2g) or a Kubernetes quantity (3Gi, 3G) in MiB."""
    kubernetes = re.fullmatch(r"(\d+)([KMGT])i?", size)
    if kubernetes:
        return int(kubernetes.group(1)) * MEMORY_MIB[kubernetes.group(2).lower()]
    jvm = MEMORY.fullmatch(size)
    assert jvm, size
    return int(jvm.group(1)) * MEMORY_MIB[jvm.group(2).lower()]


def prod_settings():
    return settings_from_text(PROD.read_text(), "conf/prod.yaml", "prod")


# --- systemd ---------------------------------------------------------------------------------


def unit_values() -> dict[str, str]:
    values = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


def install_steps() -> str:
    [steps] = [block for block in blocks(section("systemd"), "sh") if "systemctl" in block]
    return steps


def test_the_page_prints_the_unit_deploy_ships():
    [printed] = blocks(section("systemd"), "ini")
    assert printed == UNIT.read_text()


def test_systemd_analyze_verify_accepts_the_unit_on_the_installed_layout(tmp_path):
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing: `apt-get install systemd` (.ci/run installs it in CI)"
    values = unit_values()
    root = tmp_path / "root"
    # the system's own units (multi-user.target, network-online.target), which the unit names
    shutil.copytree(Path("/lib/systemd/system"), root / "usr/lib/systemd/system", symlinks=True)
    executable = root / shlex.split(values["ExecStart"])[0].lstrip("/")
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    installed = root / "etc/systemd/system" / UNIT.name
    installed.parent.mkdir(parents=True)
    shutil.copy(UNIT, installed)
    done = subprocess.run([tool, "verify", f"--root={root}", f"/etc/systemd/system/{UNIT.name}"],
                          capture_output=True, text=True, timeout=60)
    said = (done.stdout + done.stderr).strip()
    assert (done.returncode, said) == (0, ""), said


def test_the_unit_parses_as_systemd_reads_it():
    """What verify does not check: each key in its section, no comment after a value."""
    section_of, current = {}, ""
    for line in UNIT.read_text().splitlines():
        if line.startswith("["):
            current = line
        elif "=" in line and not line.startswith("#"):
            section_of[line.split("=", 1)[0]] = current
            assert "#" not in line, f"systemd takes a comment after a value for part of the value: {line}"
    assert section_of["StartLimitIntervalSec"] == section_of["StartLimitBurst"] == "[Unit]"
    values = unit_values()
    assert (values["KillMode"], values["Restart"], values["RestartPreventExitStatus"]) == ("mixed", "on-failure", "2")
    assert not values["EnvironmentFile"].startswith("-"), "a secrets file that may be missing hides its absence"


def test_the_install_steps_make_every_path_the_unit_names():
    values, steps = unit_values(), install_steps()
    binary = shlex.split(values["ExecStart"])[0]
    for path in (values["WorkingDirectory"], values["EnvironmentFile"], str(Path(binary).parents[1]),
                 f"deploy/systemd/{UNIT.name} /etc/systemd/system/"):
        assert path in steps, f"the install steps never make {path}"
    assert f"cp -r conf deploy/pipelines {values['WorkingDirectory']}/" in steps
    assert "KAFKA_PASSWORD=" in steps  # the secret the pipeline reads, into the EnvironmentFile


def test_the_unit_runs_the_installed_pipeline_with_conf_prod(tmp_path, monkeypatch, capsys):
    """`ExecStart` from `WorkingDirectory` after the install steps' copy: `ingest validate` with
    the same pipeline and --env accepts it (the secret from the EnvironmentFile)."""
    values = unit_values()
    argv = shlex.split(values["ExecStart"])
    assert Path(argv[0]).name == "ingest"
    parsed = cli.build_parser().parse_args(argv[1:])
    assert (parsed.command, parsed.env, parsed.files) == ("run", "prod", ["pipelines/orders.yaml"])
    project = tmp_path / "project"
    shutil.copytree(REPO / "conf", project / "conf")
    shutil.copytree(REPO / "deploy" / "pipelines", project / "pipelines")
    monkeypatch.chdir(project)
    monkeypatch.setenv("KAFKA_PASSWORD", "from-the-environment-file")
    for name in ("KAFKA_BOOTSTRAP", "DATA_ROOT", "INGEST_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["validate", "--no-spark", "--env", parsed.env, *parsed.files]) == 0, capsys.readouterr()


def test_the_unit_gives_the_service_room_beside_the_heap():
    heap = prod_settings().session_conf["spark.driver.memory"]
    assert mib(unit_values()["MemoryMax"]) >= mib(heap) + HEADROOM_MIB


# --- Kubernetes ------------------------------------------------------------------------------


def manifest() -> dict[str, dict]:
    return {document["kind"]: document for document in yaml.safe_load_all(MANIFEST.read_text())}


def container() -> dict:
    [one] = manifest()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return one


def test_the_page_prints_the_deployment_deploy_ships():
    printed = [yaml.safe_load(block) for block in blocks(section("Kubernetes"), "yaml")]
    assert manifest()["Deployment"] in printed


def test_the_configmap_carries_the_repositorys_conf_and_pipeline():
    data = manifest()["ConfigMap"]["data"]
    assert data == {"prod.yaml": PROD.read_text(), "orders.yaml": PIPELINE.read_text()}


def mounted_files() -> dict[str, str]:
    """Path in the container -> the ConfigMap key mounted there."""
    spec = manifest()["Deployment"]["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    files = {}
    for mount in container()["volumeMounts"]:
        config_map = volumes[mount["name"]].get("configMap")
        for item in (config_map or {}).get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = item["key"]
    return files


def test_the_command_is_an_ingest_run_of_the_mounted_files():
    one = container()
    assert one["command"] == ["ingest"]  # exec form: ingest is PID 1 and gets the SIGTERM
    parsed = cli.build_parser().parse_args(one["args"])
    assert parsed.command == "run" and not parsed.once
    files = mounted_files()
    for pipeline in parsed.files:
        assert files[f"{one['workingDir']}/{pipeline}"] == "orders.yaml"
    assert files[f"{one['workingDir']}/conf/{parsed.env}.yaml"] == "prod.yaml"
    deployment = manifest()["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"


def environment() -> dict[str, str]:
    """The container's environment; a secret's value stands in for the one the cluster has."""
    return {variable["name"]: variable.get("value", "from-a-secret") for variable in container()["env"]}


def loaded_pipeline():
    data = manifest()["ConfigMap"]["data"]
    settings = settings_from_text(data["prod.yaml"], "conf/prod.yaml", "prod")
    loaded = load_text(data["orders.yaml"], "pipelines/orders.yaml", "prod", environ=environment(),
                       settings=settings)  # only the container's environment: nothing from this machine
    return loaded


def test_the_pipeline_loads_with_the_deployments_environment_and_names_every_variable():
    loaded = loaded_pipeline()
    used = set(re.findall(r"\$\{(\w+)", PIPELINE.read_text()))
    assert set(environment()) <= used, f"set but never read: {set(environment()) - used}"
    assert "from-a-secret" in loaded.pipeline.secret_values  # KAFKA_PASSWORD, masked everywhere


def test_the_probes_ask_metrics_on_the_port_the_pipeline_serves():
    port = loaded_pipeline().pipeline.operations.metrics.prometheus_port
    one = container()
    [declared] = [p for p in one["ports"] if p["name"] == "metrics"]
    assert declared["containerPort"] == port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = one[probe]["httpGet"]
        assert get["path"] == "/metrics" and get["port"] in ("metrics", port), probe
    # /metrics answers only once the session is up, after a killed pod's lease is waited out
    startup = one["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= STALE_AFTER_S + 120


def test_the_pod_asks_for_the_heap_and_the_room_beside_it():
    heap = mib(settings_from_text(manifest()["ConfigMap"]["data"]["prod.yaml"], "conf/prod.yaml",
                                  "prod").session_conf["spark.driver.memory"])
    resources = container()["resources"]
    assert mib(resources["requests"]["memory"]) >= heap + HEADROOM_MIB
    assert resources["limits"]["memory"] == resources["requests"]["memory"]


def test_conf_prod_states_the_session_a_service_starts():
    assert set(prod_settings().session_conf) == {"spark.master", "spark.driver.memory"}


# --- every block of the page -----------------------------------------------------------------


def test_every_block_of_the_production_page_is_checked_here():
    """The unit and the Deployment are deploy/'s files; the session snippet is conf/prod.yaml's;
    a shell block is not run (root, a cluster) but names what the tests above check."""
    text = PAGE.read_text()
    found = re.findall(r"([^\n]*)\n```(\w*)\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert len(found) >= 5
    for before, language, body in found:
        if language == "ini":
            assert body == UNIT.read_text()
        elif language == "yaml" and "kind: Deployment" in body:
            assert yaml.safe_load(body) == manifest()["Deployment"]
        elif language == "yaml":
            snippet = settings_from_text(body, "docs/production.md", "prod")
            assert snippet.session_conf == prod_settings().session_conf, body
        else:
            assert language == "sh" and "not run:" in before and "tests/unit/test_deploy.py" in before, body
            files = re.findall(r"deploy/\S+\.(?:service|yaml)", body)
            assert files and all((REPO / file).is_file() for file in files), body
